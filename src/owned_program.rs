//! A program clshim made for itself (the parts of a recipe made again, or the
//! implementation's program of clshim binaries that the application never saw): one owner
//! that releases it, through the implementation's own `clReleaseProgram`, when it goes out
//! of scope on any path, unless it is handed to the application with `into_raw`.

use crate::cl::cl_program;
use crate::dispatch::Route;

pub struct OwnedProgram {
    route: Route,
    program: cl_program,
}

impl OwnedProgram {
    /// # Safety
    /// `program` is a live, non-NULL program whose only reference clshim holds (the
    /// application never saw it), reachable through `route`.
    pub unsafe fn new(route: Route, program: cl_program) -> OwnedProgram {
        debug_assert!(!program.is_null());
        OwnedProgram { route, program }
    }

    /// The handle, to pass to the implementation while still owned.
    pub fn get(&self) -> cl_program {
        self.program
    }

    /// The handle, now the application's: no longer released here.
    pub fn into_raw(self) -> cl_program {
        let program = self.program;
        std::mem::forget(self);
        program
    }
}

impl Drop for OwnedProgram {
    fn drop(&mut self) {
        // SAFETY: a live program (`new`'s contract), whose dispatch the route finds.
        if let Some(release) = unsafe { self.route.release_program(self.program) } {
            // SAFETY: its own clReleaseProgram, dropping clshim's only reference; the handle
            // is never used again (the owner is being dropped).
            unsafe { release(self.program) };
        }
    }
}
