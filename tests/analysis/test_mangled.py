"""``analysis.mangled``: the function name of Itanium-mangled kernel names, checked against
what ``c++filt`` prints for them (written out by hand below)."""

from __future__ import annotations

import pytest

from stepscope.analysis.kernel_profiles import base_name
from stepscope.analysis.mangled import mangled_function


@pytest.mark.parametrize(("mangled", "function"), [
    ("_Z6kernelPfi", "kernel"),  # kernel(float*, int)
    ("_Z10add_kernelILi4EEvPfS0_", "add_kernel"),  # void add_kernel<4>(float*, float*)
    ("_ZN2ns6kernelIiEEvPT_", "kernel"),  # void ns::kernel<int>(int*)
    ("_ZN2ns5OuterIiE5innerEv", "inner"),  # ns::Outer<int>::inner()
    ("_ZNK3foo3barEv", "bar"),  # foo::bar() const
    ("_ZNSt6vectorIiSaIiEE4sizeEv", "size"),  # std::vector<int>::size()
    # cuBLAS's gemv: template arguments with literals, nested templates, substitutions
    ("_ZN8internal5gemvx6kernelIiiffffLb0ELb1ELb1ELb0ELi7ELb0E18cublasGemvParamsExIi30cublas"
     "GemvTensorStridedBatchedIKfES5_S3_IfEfEEENSt9enable_ifIXntT5_EvE4typeET11_", "kernel"),
])
def test_the_function_name_of_mangled_kernels(mangled: str, function: str) -> None:
    assert mangled_function(mangled) == function
    assert base_name(mangled) == function  # what ncu's --kernel-name-base function matches


@pytest.mark.parametrize("name", [
    "void ns::copy<4>(const char*, int)", "ampere_sgemm_128x64_nn", "_Z", "_Zx", "_ZN2nsC1Ev",
    "_Z99short", "_ZN3fooE",
])
def test_names_it_does_not_read_are_left_to_base_name(name: str) -> None:
    got = mangled_function(name)
    assert got is None or got == "foo"
    if name.startswith("void"):
        assert base_name(name) == "copy"
