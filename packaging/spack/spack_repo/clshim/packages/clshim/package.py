# The Spack package of clshim (Spack 1.0 and newer: package API v2, the Cargo build
# system of Spack's builtin repository). It builds the release tarball that
# scripts/release makes (the crates vendored in it, so the build needs no network),
# installs the `clshim` command in bin/ and the interposer library in lib/, and checks
# both: after the install with `spack install --test=root`, and later with
# `spack test run clshim`. How it was checked: docs/install.md.
from spack_repo.builtin.build_systems.cargo import CargoPackage

from spack.package import *


class Clshim(CargoPackage):
    """OpenCL interposer that shows where kernel-build time goes (program builds, binary
    queries, each kernel's first launch) per process and per MPI rank, and can remove
    pocl's second compile and serve warm starts from pocl's own binaries."""

    homepage = "https://pypi.org/project/clshim/"
    # The release tarball is also clshim's sdist on PyPI (`pypi = ...` is PythonPackage's
    # alone, so the address is written out).
    url = "https://files.pythonhosted.org/packages/source/c/clshim/clshim-0.2.0.tar.gz"

    license("MIT")

    # scripts/release writes the sha256 of the tarball it made into its copy of this file.
    version("0.2.0")

    depends_on("c", type="build")  # rustc links the library and the command with cc
    depends_on("rust@1.75:", type="build")  # Cargo.toml's rust-version

    # The lock file, and with it the vendored crates, decide every dependency's version.
    build_args = ["--locked"]

    # The library cargo built beside the command, where the command looks for it
    # (../lib from its own folder): `cargo install` places only the command.
    @run_after("install")
    def install_library(self):
        mkdirp(self.prefix.lib)
        built = join_path(self.stage.source_path, "target", "release", "libclshim.so")
        install(built, self.prefix.lib)

    def setup_run_environment(self, env):
        # For scripts that preload it by hand: LD_PRELOAD=$CLSHIM_LIB.
        env.set("CLSHIM_LIB", join_path(self.prefix.lib, "libclshim.so"))

    # clshim's own test suite needs pocl and Python environments (scripts/test runs it);
    # the install-time check is the smoke test below.
    install_time_test_callbacks = ["check"]

    def check(self):
        self.test_version()
        self.test_library_loads()

    def test_version(self):
        """clshim --version names the installed version"""
        clshim = which(self.prefix.bin.clshim, required=True)
        out = clshim("--version", output=str, error=str)
        assert out.strip() == f"clshim {self.spec.version}", out

    def test_library_loads(self):
        """clshim run preloads the installed library into the command it runs"""
        clshim = which(self.prefix.bin.clshim, required=True)
        # The shell's own map lists the library when the dynamic linker loaded it.
        clshim("run", "--", "sh", "-c", "grep -q /libclshim.so /proc/$$/maps")
        clshim("run", "--", "true")
