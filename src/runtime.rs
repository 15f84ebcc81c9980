//! The process-wide state, made at the first intercepted call and never before: the
//! configuration, the device and program registries and the recorder. Creating it is also
//! when clshim prints configuration warnings, installs its logger and registers its exit
//! summary and fork handlers, so a process that never calls OpenCL (a linker pocl spawns, a
//! shell) sees no output, no file and no handler from clshim.

use crate::config::Config;
use crate::devices::DeviceCache;
use crate::dispatch::Route;
use crate::guard::catch;
use crate::logger::stderr_line;
use crate::programs::Registry;
use crate::record::Recorder;
use std::sync::OnceLock;

pub struct Runtime {
    pub config: Config,
    pub devices: DeviceCache,
    pub programs: Registry,
    pub recorder: Recorder,
    /// `CLSHIM_TRACE_SOURCES=1` with a trace directory: where program texts are kept.
    pub sources: Option<crate::sources::Keeper>,
}

static RUNTIME: OnceLock<Runtime> = OnceLock::new();

/// The state if some call has already made it.
pub fn existing() -> Option<&'static Runtime> {
    RUNTIME.get()
}

/// The state, made on first use. None only if making it failed, in which case the caller
/// forwards its call unchanged.
pub fn get(route: Route) -> Option<&'static Runtime> {
    if let Some(rt) = RUNTIME.get() {
        return Some(rt);
    }
    catch(|| RUNTIME.get_or_init(|| init(route)))
}

fn init(route: Route) -> Runtime {
    let (config, warnings) = Config::from_env();
    for w in &warnings {
        stderr_line(w);
    }
    std::panic::set_hook(Box::new(|info| {
        stderr_line(&format!(
            "clshim: internal error ({info}); unless the process aborts here, the call is forwarded unchanged"
        ));
    }));
    if config.binaries == crate::config::BinaryPolicy::Substitute
        && config.warm_service
        && !config.substitute_when_busy
    {
        // The first look at the CPUs' idle time: the first program's build is its window.
        crate::idle_cpus::start();
    }
    let recorder = Recorder::new(&config, route.mode_name());
    crate::logger::install(&config.log_filter, recorder.rank());
    // SAFETY: registering plain extern "C" functions with no captured state.
    unsafe {
        libc::atexit(at_exit);
        libc::pthread_atfork(
            Some(before_fork),
            Some(after_fork_parent),
            Some(after_fork_child),
        );
    }
    let sources = config
        .trace_dir
        .as_deref()
        .filter(|_| config.trace_sources)
        .map(|d| crate::sources::Keeper::new(d, config.trace_mode));
    Runtime {
        sources,
        config,
        devices: DeviceCache::default(),
        programs: Registry::default(),
        recorder,
    }
}

extern "C" fn at_exit() {
    catch(|| {
        if let Some(rt) = RUNTIME.get() {
            // The node's warm service makes this process's requests for the driver's
            // binaries before it ends (`store::service`); what it made, for the exit line.
            let compiled = rt.recorder.compile_seconds();
            if let Some(a) = crate::store::service::at_exit(rt.config.warm_service, compiled) {
                rt.recorder.note_service(a);
            }
            if rt.config.summary {
                if let Some(line) = rt.recorder.summary() {
                    stderr_line(&line);
                }
            }
            // A file without this record is a process that never reached exit().
            rt.recorder.record_exit();
        }
    });
}

// Fork handlers: hold every lock registered as fork-held (`Lock::new_fork_held`) across
// fork() so the child never inherits one that another thread held at the instant of the
// fork (lock.rs says why those locks are std mutexes). clshim never forks, nor holds a
// lock while calling into the implementation, so the forking thread never holds one.
extern "C" fn before_fork() {
    crate::lock::hold_all_for_fork();
}

extern "C" fn after_fork_parent() {
    crate::lock::release_after_fork();
}

extern "C" fn after_fork_child() {
    // The child's trace file and tallies start afresh at its first record (pid check).
    after_fork_parent();
}
