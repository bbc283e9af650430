"""Static checks of candidate source (AST), run in the evaluator before any candidate code runs.

They find what is visible in the text: Triton kernels (names and line ranges, for launch and
profiler matching), torch compute ops outside kernels, try/except fallbacks around launches,
imports and calls that break the sandbox, thread and stream use, monkey-patching of timers or
harness primitives, persisting-L2 tricks and half-precision casts. Dynamic checks in the child
process (launch counts, dispatched aten ops, identity of captured primitives) cover what the
text can hide.
"""

from __future__ import annotations

import ast
import threading
from dataclasses import dataclass, field

__all__ = ["StaticReport", "analyze_source", "parse_source", "TORCH_COMPUTE_NAMES"]

# CPython 3.11's ast.parse is not thread-safe: concurrent parses can fail with "SystemError: AST
# constructor recursion depth mismatch" (the evaluator analyses candidates on several threads).
_PARSE_LOCK = threading.Lock()


def parse_source(source: str, filename: str = "<candidate>") -> ast.Module:
    """``ast.parse``, serialised across threads."""
    with _PARSE_LOCK:
        return ast.parse(source, filename=filename)

TORCH_COMPUTE_NAMES = frozenset(
    """
    matmul mm bmm addmm addmv addbmm baddbmm einsum tensordot dot vdot mv inner outer kron linear bilinear
    conv1d conv2d conv3d conv_transpose1d conv_transpose2d conv_transpose3d unfold fold
    softmax log_softmax softmin relu relu_ relu6 gelu silu sigmoid tanh elu selu celu leaky_relu hardtanh
    softplus softsign mish hardswish hardsigmoid logsigmoid glu prelu rrelu threshold
    exp exp2 expm1 log log2 log10 log1p sqrt rsqrt abs neg reciprocal sin cos tan pow square erf erfc
    sum nansum mean nanmean prod max min amax amin argmax argmin var std var_mean std_mean norm
    logsumexp cumsum cumprod cummax cummin sort argsort topk kthvalue median mode
    layer_norm batch_norm group_norm instance_norm rms_norm local_response_norm normalize dropout
    scaled_dot_product_attention multi_head_attention_forward
    max_pool1d max_pool2d max_pool3d avg_pool1d avg_pool2d avg_pool3d adaptive_avg_pool1d
    adaptive_avg_pool2d adaptive_avg_pool3d adaptive_max_pool1d adaptive_max_pool2d lp_pool2d
    add sub subtract mul multiply div divide true_divide floor_divide remainder fmod addcmul addcdiv
    where clamp clip clamp_min clamp_max maximum minimum fmax fmin lerp
    cross_entropy mse_loss l1_loss nll_loss kl_div smooth_l1_loss huber_loss binary_cross_entropy
    binary_cross_entropy_with_logits cosine_similarity pairwise_distance cdist triplet_margin_loss
    hinge_embedding_loss margin_ranking_loss cosine_embedding_loss
    triu tril diag trace cross interpolate upsample pad grid_sample embedding one_hot
    """.split()
)
_COMPUTE_MODULES = frozenset(
    """
    Linear Bilinear Conv1d Conv2d Conv3d ConvTranspose1d ConvTranspose2d ConvTranspose3d ReLU GELU SiLU
    Sigmoid Tanh Softmax LogSoftmax LayerNorm BatchNorm1d BatchNorm2d BatchNorm3d GroupNorm InstanceNorm1d
    InstanceNorm2d InstanceNorm3d RMSNorm Dropout MultiheadAttention MaxPool1d MaxPool2d MaxPool3d AvgPool1d
    AvgPool2d AvgPool3d AdaptiveAvgPool2d Embedding LSTM GRU RNN Transformer TransformerEncoderLayer
    Sequential ELU SELU Mish Hardswish Hardtanh LeakyReLU Softplus GLU PReLU Upsample
    """.split()
)
_SANDBOX_MODULES = frozenset(
    """
    ctypes cffi socket subprocess multiprocessing signal gc importlib urllib http requests httpx pickle
    marshal shutil pty resource mmap sysconfig code codeop runpy asyncio selectors ssl ftplib smtplib
    telnetlib xmlrpc webbrowser builtins inspect
    """.split()
)
_FOREIGN_KERNEL_MODULES = frozenset({"cupy", "numba", "pycuda", "cuda", "tvm", "jax", "tilelang", "cutlass"})
_THREAD_MODULES = frozenset({"threading", "_thread", "concurrent"})
_SANDBOX_CALLS = frozenset({"eval", "exec", "compile", "__import__", "breakpoint", "globals", "vars", "open"})
_SANDBOX_ATTRS = frozenset(
    """
    system popen fork forkpty execv execve execl execlp execvp spawnv spawnl posix_spawn kill killpg
    __globals__ __code__ __builtins__ __subclasses__ __dict__ modules f_back f_globals _getframe
    load_inline cpp_extension
    _C _python_dispatch _disable_current_modes _disable_infra_mode _get_current_dispatch_mode
    _get_current_dispatch_mode_stack _len_torch_dispatch_stack _pop_torch_dispatch_stack _unset_dispatch_mode
    _get_dispatch_stack_at TorchDispatchMode TorchFunctionMode DisableTorchFunction DisableTorchFunctionSubclass
    _DisableTorchDispatch _ExcludeDispatchKeyGuard
    """.split()
)
# Host-side compute that no aten op shows: the work done in numpy (or Python lists) behind a copy kernel.
_HOST_COMPUTE_MODULES = frozenset({"numpy", "scipy", "numexpr", "jax"})
_HOST_COMPUTE_ATTRS = frozenset({"numpy", "tolist", "__array__", "__dlpack__", "from_numpy", "from_dlpack"})
_TIMER_ATTRS = frozenset(
    {"perf_counter", "perf_counter_ns", "time", "monotonic", "monotonic_ns", "process_time", "Event",
     "elapsed_time", "synchronize", "record", "do_bench", "Timer"}
)
_L2_MARKERS = ("accesspolicywindow", "persisting", "hitratio", "cudastreamsetattribute", "cudadevicesetlimit",
               "cudactxresetpersistingl2cache", "l2cache")
_HALF_NAMES = frozenset({"float16", "bfloat16", "half", "float8e4nv", "float8e5", "float8_e4m3fn", "float8_e5m2"})
_TRITON_DECORATORS = frozenset({"jit", "autotune", "heuristics"})


@dataclass
class StaticReport:
    """What the candidate's source shows. Lists hold human-readable ``line N: ...`` findings."""

    syntax_error: str | None = None
    kernels: dict[str, tuple[int, int]] = field(default_factory=dict)  # name -> (first, last) line
    defines_model_new: bool = False
    torch_ops: list[str] = field(default_factory=list)
    try_except: list[str] = field(default_factory=list)
    sandbox: list[str] = field(default_factory=list)
    foreign_kernels: list[str] = field(default_factory=list)
    threads: list[str] = field(default_factory=list)
    streams: list[str] = field(default_factory=list)
    timer_patches: list[str] = field(default_factory=list)
    persisting_l2: list[str] = field(default_factory=list)
    half_casts: list[str] = field(default_factory=list)
    kernel_language: str = "Triton"  # what the candidate's kernels are written in (for messages)


def _dotted(node: ast.AST) -> str:
    """``torch.nn.functional.relu`` for an attribute chain, '' when not a plain chain."""
    parts: list[str] = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
        return ".".join(reversed(parts))
    return ""


def _is_triton_kernel(fn: ast.FunctionDef) -> bool:
    for dec in fn.decorator_list:
        target = dec.func if isinstance(dec, ast.Call) else dec
        name = _dotted(target)
        if name.split(".")[-1] in _TRITON_DECORATORS and ("triton" in name or name in _TRITON_DECORATORS):
            return True
    return False


class _Visitor(ast.NodeVisitor):
    def __init__(self, report: StaticReport) -> None:
        self.r = report
        self.in_init = 0
        self.module_aliases: dict[str, str] = {}  # local name -> imported module
        self.compute_members: set[str] = set()  # self.<name> holding an nn compute module

    # imports ---------------------------------------------------------------------------------
    def _check_module(self, module: str, line: int) -> None:
        root = module.split(".")[0]
        if root in _SANDBOX_MODULES:
            self.r.sandbox.append(f"line {line}: imports {module}")
        if root in _HOST_COMPUTE_MODULES:
            self.r.torch_ops.append(f"line {line}: imports {module} (host compute outside kernels)")
        if root in _FOREIGN_KERNEL_MODULES or "cpp_extension" in module:
            self.r.foreign_kernels.append(f"line {line}: imports {module} (not a Triton kernel)")
        if root in _THREAD_MODULES:
            self.r.threads.append(f"line {line}: imports {module}")

    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            self._check_module(alias.name, node.lineno)
            self.module_aliases[alias.asname or alias.name.split(".")[0]] = alias.name
        self.generic_visit(node)

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        module = node.module or ""
        self._check_module(module, node.lineno)
        for alias in node.names:
            self._check_module(f"{module}.{alias.name}", node.lineno)
            self.module_aliases[alias.asname or alias.name] = f"{module}.{alias.name}"
        self.generic_visit(node)

    # definitions -----------------------------------------------------------------------------
    def visit_FunctionDef(self, node: ast.FunctionDef) -> None:
        if _is_triton_kernel(node):
            self.r.kernels[node.name] = (node.lineno, node.end_lineno or node.lineno)
            return  # kernel bodies are Triton, not torch: skip them
        if node.name == "__init__":
            self.in_init += 1
            self.generic_visit(node)
            self.in_init -= 1
            return
        self.generic_visit(node)

    visit_AsyncFunctionDef = visit_FunctionDef  # type: ignore[assignment]

    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        if node.name == "ModelNew":
            self.r.defines_model_new = True
        self.generic_visit(node)

    def visit_Assign(self, node: ast.Assign) -> None:
        for target in node.targets:
            self._check_patch(target, node.lineno)
            if (
                self.in_init
                and isinstance(target, ast.Attribute)
                and _dotted(target.value) == "self"
                and isinstance(node.value, ast.Call)
                and _dotted(node.value.func).split(".")[-1] in _COMPUTE_MODULES
            ):
                self.compute_members.add(target.attr)
        self.generic_visit(node)

    def _check_patch(self, target: ast.AST, line: int) -> None:
        if not isinstance(target, ast.Attribute):
            return
        chain = _dotted(target)
        root = chain.split(".")[0]
        if root not in self.module_aliases and root not in ("torch", "time", "triton", "os", "sys"):
            return
        if target.attr in _TIMER_ATTRS:
            self.r.timer_patches.append(f"line {line}: assigns {chain}")
        else:
            self.r.sandbox.append(f"line {line}: monkey-patches {chain}")

    # statements and expressions ------------------------------------------------------------------
    def visit_Try(self, node: ast.Try) -> None:
        for handler in node.handlers:
            reraises = handler.body and isinstance(handler.body[-1], ast.Raise)
            if not reraises:
                self.r.try_except.append(f"line {handler.lineno}: except handler swallows the error")
        self.generic_visit(node)

    visit_TryStar = visit_Try  # type: ignore[assignment]

    def visit_BinOp(self, node: ast.BinOp) -> None:
        if isinstance(node.op, ast.MatMult) and not self.in_init:
            self.r.torch_ops.append(f"line {node.lineno}: '@' matrix multiply")
        self.generic_visit(node)

    def visit_Attribute(self, node: ast.Attribute) -> None:
        if node.attr in _SANDBOX_ATTRS:
            self.r.sandbox.append(f"line {node.lineno}: uses .{node.attr}")
        if node.attr in _HOST_COMPUTE_ATTRS and not self.in_init:
            self.r.torch_ops.append(f"line {node.lineno}: .{node.attr} (host compute outside kernels)")
        if node.attr in _HALF_NAMES:
            self.r.half_casts.append(f"line {node.lineno}: {_dotted(node) or node.attr}")
        if node.attr in ("Stream", "stream", "cuda_stream", "ExternalStream", "set_stream"):
            self.r.streams.append(f"line {node.lineno}: {_dotted(node) or node.attr}")
        self.generic_visit(node)

    def visit_Constant(self, node: ast.Constant) -> None:
        if isinstance(node.value, str):
            low = node.value.lower()
            if any(m in low for m in _L2_MARKERS):
                self.r.persisting_l2.append(f"line {node.lineno}: string {node.value[:40]!r}")
        self.generic_visit(node)

    def visit_Name(self, node: ast.Name) -> None:
        low = node.id.lower()
        if any(m in low for m in _L2_MARKERS):
            self.r.persisting_l2.append(f"line {node.lineno}: {node.id}")
        self.generic_visit(node)

    def visit_Call(self, node: ast.Call) -> None:
        name = _dotted(node.func)
        leaf = name.split(".")[-1] if name else (node.func.attr if isinstance(node.func, ast.Attribute) else "")
        if isinstance(node.func, ast.Name) and node.func.id in _SANDBOX_CALLS:
            self.r.sandbox.append(f"line {node.lineno}: calls {node.func.id}()")
        if isinstance(node.func, ast.Name) and node.func.id in ("getattr", "setattr", "delattr"):
            if len(node.args) < 2 or not isinstance(node.args[1], ast.Constant):
                self.r.sandbox.append(f"line {node.lineno}: {node.func.id} with a computed name")
            elif node.func.id != "getattr" and _dotted(node.args[0]).split(".")[0] in self.module_aliases:
                self.r.sandbox.append(f"line {node.lineno}: {node.func.id} on module {_dotted(node.args[0])}")
        if leaf in ("half", "bfloat16"):
            self.r.half_casts.append(f"line {node.lineno}: .{leaf}()")
        if not self.in_init:
            self._check_compute_call(node, name, leaf)
        self.generic_visit(node)

    def _check_compute_call(self, node: ast.Call, name: str, leaf: str) -> None:
        root = name.split(".")[0] if name else ""
        module = self.module_aliases.get(root, "")
        if leaf in TORCH_COMPUTE_NAMES:
            torch_rooted = root == "torch" or module.startswith("torch") or root == "F"
            method_call = isinstance(node.func, ast.Attribute) and not torch_rooted and root not in (
                "tl", "triton", "math", "np", "numpy", "builtins"
            ) and module.split(".")[0] not in ("triton", "math", "numpy")
            if torch_rooted or method_call:
                self.r.torch_ops.append(f"line {node.lineno}: {name or '.' + leaf}()")
        elif leaf in _COMPUTE_MODULES and (root in ("nn", "torch") or module.startswith("torch")):
            self.r.torch_ops.append(f"line {node.lineno}: {name}() module in forward path")
        elif name.startswith("self.") and name.count(".") == 1 and leaf in self.compute_members:
            self.r.torch_ops.append(f"line {node.lineno}: {name}() calls a torch.nn compute module")


def analyze_source(source: str, filename: str = "<candidate>") -> StaticReport:
    """Parse ``source`` and collect the static findings (a syntax error stops the analysis)."""
    report = StaticReport()
    try:
        tree = parse_source(source, filename)
    except SyntaxError as err:
        report.syntax_error = f"{type(err).__name__}: {err.msg} (line {err.lineno}, column {err.offset})"
        return report
    visitor = _Visitor(report)
    visitor.visit(tree)
    # `self.<member>(...)` calls are matched against members found anywhere in __init__, so re-run
    # the compute-call pass once the members are known (order of methods in the class is free).
    if visitor.compute_members:
        report.torch_ops.clear()
        second = _Visitor(StaticReport())
        second.compute_members = set(visitor.compute_members)
        second.visit(tree)
        report.torch_ops = second.r.torch_ops
    return report
