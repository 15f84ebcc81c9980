#%Module1.0
## The Environment Modules (Tcl) module of a plain clshim install (scripts/install
## --module-syntax tcl): puts the command on PATH and names its library. scripts/install
## fills in the two @...@ values and writes it as <module dir>/clshim/<version>.
set root "@PREFIX@"

proc ModulesHelp {} {
    puts stderr "clshim @VERSION@, installed in @PREFIX@."
    puts stderr "  clshim run --trace-dir T -- mpiexec -n 4 python app.py    # your command, as you run it"
    puts stderr "  clshim report T                                         # where build time went"
    puts stderr "  clshim --help"
    puts stderr "CLSHIM_LIB names the library, for scripts that preload it by hand"
    puts stderr "(LD_PRELOAD=\$CLSHIM_LIB); clshim run finds it without it."
}
module-whatis "Name: clshim"
module-whatis "Version: @VERSION@"
module-whatis "Description: OpenCL interposer: where kernel-build time goes, per process and per MPI rank"

# One clshim at a time: Lmod swaps versions of one name by itself, Environment Modules
# needs to be told.
conflict clshim

prepend-path PATH $root/bin
setenv CLSHIM_LIB $root/lib/libclshim.so
