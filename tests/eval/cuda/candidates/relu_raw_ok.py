"""level1/relu with a torch-free .cu (no_implicit_headers): the kernel and a raw-pointer launcher in
cuda_sources, the torch::Tensor wrapper in cpp_sources. nvcc then compiles in about a second."""
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_source = """
#include <cstdint>
#include <cuda_runtime.h>

__global__ void relu_raw_kernel(const float* __restrict__ x, float* __restrict__ y, int64_t n) {
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = fmaxf(x[i], 0.f);
}

void launch_relu_raw(const float* x, float* y, int64_t n) {
    const int threads = 256;
    relu_raw_kernel<<<(unsigned)((n + threads - 1) / threads), threads>>>(x, y, n);
}
"""

cpp_source = """
void launch_relu_raw(const float* x, float* y, int64_t n);

torch::Tensor relu_raw(torch::Tensor x) {
    auto xc = x.contiguous();
    auto y = torch::empty_like(xc);
    launch_relu_raw(xc.data_ptr<float>(), y.data_ptr<float>(), xc.numel());
    return y;
}
"""

ext = load_inline(name="relu_raw_ext", cpp_sources=cpp_source, cuda_sources=cuda_source, functions=["relu_raw"],
                  no_implicit_headers=True)


class ModelNew(nn.Module):
    def forward(self, x):
        return ext.relu_raw(x)
