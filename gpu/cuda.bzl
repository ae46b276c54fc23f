"""cuda_kernels: Tessel's one rule for CUDA kernel files.

nvcc compiles each .cu file for sm_80 (A100) and sm_90 (H100) SASS plus
compute_90 PTX (later architectures JIT-compile it), with -fmad=false: no
fused multiply-adds, the CPU code's arithmetic. The objects go into a static
archive wrapped in a cc_library with the launchers' plain C++ header, linked
against the static CUDA runtime. nvcc finds its include/ and nvcc.profile
relative to argv[0], so it is called by its real path.
"""

def cuda_kernels(name, srcs, hdrs, textual = [], visibility = None):
    """A cc_library `name` of nvcc-compiled kernels.

    Args:
      name: the cc_library; the archive is lib<name>.a from the genrule <name>_a.
      srcs: the .cu files of this package.
      hdrs: the launchers' header(s): plain C++, included by gcc-compiled code.
      textual: other headers the .cu files include (labels, e.g. //core:half_bits.h).
      visibility: of the cc_library.
    """
    objs = []
    cmds = []
    for src in srcs:
        obj = "$(@D)/%s_%s.o" % (name, src.replace("/", "_").replace(".cu", ""))
        objs.append(obj)
        cmds.append(
            "$$(readlink -f $(location @cuda//:nvcc)) -O2 -std=c++17 -fmad=false " +
            "-Xcompiler -fPIC -I. " +
            "-gencode arch=compute_80,code=sm_80 " +
            "-gencode arch=compute_90,code=sm_90 " +
            "-gencode arch=compute_90,code=compute_90 " +
            "-c $(location %s) -o %s" % (src, obj),
        )
    native.genrule(
        name = name + "_a",
        srcs = srcs + hdrs + textual,
        outs = ["lib%s.a" % name],
        cmd = " && ".join(cmds + ["ar rcs $@ " + " ".join(objs)]),
        tools = ["@cuda//:nvcc"],
    )
    native.cc_library(
        name = name,
        srcs = [":%s_a" % name],
        hdrs = hdrs,
        linkstatic = True,
        visibility = visibility,
        deps = ["@cuda//:cudart_static"],
    )
