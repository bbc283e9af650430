"""Task modules in the evaluation child: shape overrides reach the constants derived from them
(KernelBench's ``bias_shape = (out_features,)``), and the module is compiled from the request's
source before candidate code runs, never re-read from the temp dir the candidate can write."""

from __future__ import annotations

import pytest

from forge_kernels.eval import EvalOptions
from forge_kernels.eval.faults import FaultClass
from forge_kernels.tasks.task import Task

DERIVED = '''
import torch
import torch.nn as nn

batch = 8
out_features = 64
bias_shape = (out_features,)


class Model(nn.Module):
    def __init__(self, bias_shape):
        super().__init__()
        self.bias = nn.Parameter(torch.randn(bias_shape))

    def forward(self, x):
        return x + self.bias


def get_inputs():
    return [torch.randn(batch, out_features)]


def get_init_inputs():
    return [bias_shape]
'''

BIAS_ADD = '''
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def bias_add(x_ptr, b_ptr, out_ptr, n, features, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    b = tl.load(b_ptr + offs % features, mask=mask)
    tl.store(out_ptr + offs, x + b, mask=mask)


class ModelNew(nn.Module):
    def __init__(self, bias_shape):
        super().__init__()
        self.bias = nn.Parameter(torch.randn(bias_shape))

    def forward(self, x):
        out = torch.empty_like(x)
        bias_add[(triton.cdiv(x.numel(), 1024),)](x, self.bias, out, x.numel(), x.shape[-1], BLOCK=1024)
        return out
'''

# plain open() is refused by the static checks; torch.save writes from C++ (no audit event),
# inside the candidate's own temp dir ($TMPDIR), where the harness used to keep the task module
CLOBBER = '''
import tempfile
torch.save({"not": "a task"}, tempfile.gettempdir() + "/task_module.py")
'''


WRONG = BIAS_ADD.replace("x + b", "x - b")


@pytest.fixture
def derived_task() -> Task:
    return Task(name="test/derived_bias", level=2, source=DERIVED,
                shapes={"cpu": {"out_features": 48}}, alt_shapes={"cpu": {"out_features": 40}})


@pytest.fixture
def options() -> EvalOptions:
    return EvalOptions(trials=1, alt_shape_trials=1)


def test_overrides_reach_derived_constants(evaluator, derived_task, options):
    result = evaluator.evaluate(derived_task, BIAS_ADD, options)
    assert result.correct, (result.fault, result.error)


def test_a_candidate_rewriting_the_task_file_changes_nothing(evaluator, derived_task, options):
    honest = evaluator.evaluate(derived_task, BIAS_ADD.replace('class ModelNew', CLOBBER + 'class ModelNew'), options)
    wrong = evaluator.evaluate(derived_task, WRONG.replace('class ModelNew', CLOBBER + 'class ModelNew'), options)
    assert honest.correct, (honest.fault, honest.error)
    assert not wrong.correct and wrong.fault != FaultClass.INTERNAL_ERROR, (wrong.fault, wrong.error)


def test_the_same_attack_through_a_real_eval_server(derived_task):
    """The task-file attack through the HTTP eval service on loopback (the path the GRPO app's
    reward actor uses): the honest kernel passes, the wrong one fails as a candidate fault."""
    import uuid

    import httpx

    from forge_kernels.eval.service import LocalEvalServer

    options = EvalOptions(trials=1, alt_shape_trials=1).model_dump(mode="json")
    with LocalEvalServer(devices="cpu", workers=1) as server, httpx.Client(base_url=server.url, timeout=120) as http:
        answers = {}
        for name, code in (("honest", BIAS_ADD), ("wrong", WRONG)):
            body = {"request_id": uuid.uuid4().hex, "task": derived_task.model_dump(mode="json"),
                    "code": code.replace("class ModelNew", CLOBBER + "class ModelNew"), "options": options}
            response = http.post("/v1/eval", json=body)
            assert response.status_code == 200, response.text
            answers[name] = response.json()["result"]
    assert answers["honest"]["correct"], answers["honest"]
    assert not answers["wrong"]["correct"] and answers["wrong"]["fault"] != "internal_error", answers["wrong"]
