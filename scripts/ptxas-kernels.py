#!/usr/bin/env python3
"""Compiles kernels/topk.cu with NVRTC (as src/index/gpu.rs does, no headers, --ftz=false) and
assembles the PTX to machine code with ptxas, printing registers, spills and shared memory per
kernel: what the driver's JIT will do on the GPU, checked without one. Needs the CUDA wheels of
scripts/setup-cuda.sh (libnvrtc.so.13 and ptxas under $CUDA_HOME).

    source scripts/setup-cuda.sh && python3 scripts/ptxas-kernels.py [sm_90 ...]
"""
import ctypes
import os
import pathlib
import subprocess
import sys
import tempfile

root = pathlib.Path(__file__).resolve().parents[1]
home = pathlib.Path(os.environ["CUDA_HOME"])
nvrtc = ctypes.CDLL(str(home / "lib" / "libnvrtc.so.13"))
source = (root / "kernels" / "topk.cu").read_bytes()


def check(rc, prog=None):
    if rc != 0:
        log = b""
        if prog is not None:
            size = ctypes.c_size_t()
            nvrtc.nvrtcGetProgramLogSize(prog, ctypes.byref(size))
            buf = ctypes.create_string_buffer(size.value)
            nvrtc.nvrtcGetProgramLog(prog, buf)
            log = buf.value
        sys.exit(f"NVRTC error {rc}: {log.decode(errors='replace')}")


for sm in sys.argv[1:] or ["sm_90"]:
    prog = ctypes.c_void_p()
    check(nvrtc.nvrtcCreateProgram(ctypes.byref(prog), source, b"topk.cu", 0, None, None))
    opts = [b"--gpu-architecture=" + sm.replace("sm_", "compute_").encode(), b"--ftz=false"]
    arr = (ctypes.c_char_p * len(opts))(*opts)
    check(nvrtc.nvrtcCompileProgram(prog, len(opts), arr), prog)
    size = ctypes.c_size_t()
    check(nvrtc.nvrtcGetPTXSize(prog, ctypes.byref(size)))
    ptx = ctypes.create_string_buffer(size.value)
    check(nvrtc.nvrtcGetPTX(prog, ptx))
    with tempfile.TemporaryDirectory() as tmp:
        path = pathlib.Path(tmp) / "topk.ptx"
        path.write_bytes(ptx.value)
        out = subprocess.run(
            [str(home / "bin" / "ptxas"), f"-arch={sm}", "-v", str(path), "-o", os.devnull],
            capture_output=True, text=True)
    if out.returncode != 0:
        sys.exit(f"ptxas {sm} failed:\n{out.stderr}")
    print(f"== {sm}: NVRTC -> ptxas ok")
    for line in out.stderr.splitlines():
        if "Compiling entry" in line or "Used" in line or "spill" in line:
            print(line.replace("ptxas info    : ", "  "))
