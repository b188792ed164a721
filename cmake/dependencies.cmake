# Third-party dependencies, all from Debian packages or PyPI (see README "Set-up").
#
# GEMM backend: chosen by measurement (docs/gemm.md, bench/gemm_bench). The target
# trainrt_gemm_backend carries its include dirs and libraries.
add_library(trainrt_gemm_backend INTERFACE)
