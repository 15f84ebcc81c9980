//! Link settings for `libclshim.so`: a fixed soname, and `-z nodelete` so the library
//! stays mapped if a loader ever `dlclose`s it as a layer, since the dispatch table and the
//! exit and fork handlers it handed out must outlive any unload. Nothing here needs an
//! OpenCL package: clshim links no OpenCL library.
fn main() {
    let os = std::env::var("CARGO_CFG_TARGET_OS").unwrap_or_default();
    if os == "linux" {
        println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libclshim.so");
        println!("cargo:rustc-cdylib-link-arg=-Wl,-z,nodelete");
    }
    println!("cargo:rerun-if-changed=build.rs");
}
