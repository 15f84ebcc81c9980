-- The Lmod module of a plain clshim install (scripts/install --module-syntax lua):
-- puts the command on PATH and names its library. scripts/install fills in the two
-- @...@ values and writes it as <module dir>/clshim/<version>.lua.
local root = "@PREFIX@"

whatis("Name: clshim")
whatis("Version: @VERSION@")
whatis("Description: OpenCL interposer: where kernel-build time goes, per process and per MPI rank")
help([[
clshim @VERSION@, installed in @PREFIX@.
  clshim run --trace-dir T -- mpiexec -n 4 python app.py    # your command, as you run it
  clshim report T                                         # where build time went
  clshim --help
CLSHIM_LIB names the library, for scripts that preload it by hand (LD_PRELOAD=$CLSHIM_LIB);
clshim run finds it without it.
]])

prepend_path("PATH", pathJoin(root, "bin"))
setenv("CLSHIM_LIB", pathJoin(root, "lib", "libclshim.so"))
