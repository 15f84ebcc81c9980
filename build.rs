//! Link settings for `libclshim`. Linux: a fixed soname, and `-z nodelete` so the library
//! stays mapped if a loader `dlclose`s it as a layer (the Khronos loader does, after
//! `clDeinitLayer`), since the dispatch table and the exit and fork handlers it handed out
//! must outlive any unload. macOS: `OpenCL.framework` is linked *weakly*, so the library
//! loads in any process, even one on a system without the framework: `src/macos.rs` needs
//! the framework's functions as imports for its `__interpose` tuples, and a weak import
//! binds to NULL instead of failing the load. Nothing here needs an OpenCL package on
//! Linux: clshim links no OpenCL library there.
fn main() {
    let os = std::env::var("CARGO_CFG_TARGET_OS").unwrap_or_default();
    if os == "linux" {
        println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libclshim.so");
        println!("cargo:rustc-cdylib-link-arg=-Wl,-z,nodelete");
    }
    if os == "macos" {
        // Every target of the package, since the library's objects (which the tests link
        // too) name the framework's functions.
        println!("cargo:rustc-link-arg=-Wl,-weak_framework,OpenCL");
        // An install name that does not record the build machine's path.
        println!("cargo:rustc-cdylib-link-arg=-Wl,-install_name,@rpath/libclshim.dylib");
    }
    println!("cargo:rerun-if-changed=build.rs");
}
