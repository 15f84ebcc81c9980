//! Software and environments not written here, one test binary: pyopencl (the Python
//! environments under .venv/), hashcat, CLBlast, clFFT and Boost.Compute, the Khronos
//! loader with Intel's CPU runtime, the clshim wheel, and clshim installed through
//! EasyBuild and module files (Lmod, Environment Modules); `scripts/test` installs them.

#[path = "../common/mod.rs"]
mod common;

mod install;
mod khronos;
mod pyopencl;
mod pyopencl_suite;
mod readme;
mod real_clients;
mod wheel;
