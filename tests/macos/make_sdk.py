"""Writes the minimal macOS "SDK" that scripts/check-macos links libclshim.dylib against:
text stubs (.tbd) naming each library's install path and exported symbols, which is all a
Mach-O linker reads from an SDK.

- usr/lib/libSystem.tbd: from the libSystem stub that the ziglang wheel ships (Apple's
  symbol list), with its target lists reduced to the two this check links (arm64-macos,
  x86_64-macos) in the spelling LLVM's TAPI reader accepts (the wheel lists arm64e and
  zig's own arm64e.x1). libc.tbd and libm.tbd point at it, as in Apple's SDK.
- usr/lib/libiconv.tbd: Rust's standard library asks for -liconv on Apple targets.
- System/Library/Frameworks/OpenCL.framework/OpenCL.tbd: the framework's install path and
  only the functions clshim imports, so a new import fails the link here and is noticed.

Usage: make_sdk.py ZIG_LIBSYSTEM_TBD OUT_DIR
"""
import os
import re
import sys

TARGETS = "[ x86_64-macos, arm64-macos ]"
OPENCL_IMPORTS = [
    "clBuildProgram", "clCompileProgram", "clCreateProgramWithBinary",
    "clCreateProgramWithSource", "clGetContextInfo", "clGetDeviceInfo",
    "clGetPlatformInfo", "clGetProgramBuildInfo", "clGetProgramInfo",
    "clLinkProgram", "clReleaseProgram",
]


def stub(install_name, symbols):
    return (
        "--- !tapi-tbd\n"
        "tbd-version:     4\n"
        f"targets:         {TARGETS}\n"
        f"install-name:    '{install_name}'\n"
        "exports:\n"
        f"  - targets:         {TARGETS}\n"
        f"    symbols:         [ {', '.join('_' + s for s in symbols)} ]\n"
        "...\n"
    )


def reduce_targets(text):
    def fix(m):
        out = []
        for t in (t.strip() for t in m.group(1).replace("\n", " ").split(",")):
            t = {"arm64e-macos": "arm64-macos"}.get(t, t)
            if t in ("x86_64-macos", "arm64-macos") and t not in out:
                out.append(t)
        return "[ " + ", ".join(out) + " ]"

    text = re.sub(r"\[([^\]]*-mac[^\]]*)\]", fix, text)
    # Export groups left with no target (catalyst-only, x86_64h-only) go entirely.
    return re.sub(r"\n  - targets: +\[  \]\n(    [^\n]*\n)*", "\n", text)


def main():
    zig_tbd, out = sys.argv[1], sys.argv[2]
    lib = os.path.join(out, "usr/lib")
    fw = os.path.join(out, "System/Library/Frameworks/OpenCL.framework")
    os.makedirs(lib, exist_ok=True)
    os.makedirs(fw, exist_ok=True)
    with open(zig_tbd) as f:
        system = reduce_targets(f.read())
    with open(os.path.join(lib, "libSystem.tbd"), "w") as f:
        f.write(system)
    for alias in ("libc.tbd", "libm.tbd"):
        p = os.path.join(lib, alias)
        if os.path.lexists(p):
            os.remove(p)
        os.symlink("libSystem.tbd", p)
    with open(os.path.join(lib, "libiconv.tbd"), "w") as f:
        f.write(stub("/usr/lib/libiconv.2.dylib", ["iconv", "iconv_open", "iconv_close"]))
    with open(os.path.join(fw, "OpenCL.tbd"), "w") as f:
        f.write(stub("/System/Library/Frameworks/OpenCL.framework/Versions/A/OpenCL", OPENCL_IMPORTS))


if __name__ == "__main__":
    main()
