//! The seccomp filter a watched process installs on itself: every system call that names a
//! file (`syscalls::watched`) stops the process for its tracer, and so does any call through
//! another architecture's entry; all other calls run untouched, so the compile pays nothing
//! for its reads, writes and memory calls. The tracer tells the kinds apart by the filter's
//! data value (`PTRACE_GETEVENTMSG`).

use super::syscalls::{watched, AUDIT_ARCH, X32_BIT};

/// Data values of the filter's `SECCOMP_RET_TRACE`.
pub const NATIVE: u64 = 1;
pub const FOREIGN: u64 = 2;

const PR_SET_NO_NEW_PRIVS: libc::c_int = 38;
const PR_SET_SECCOMP: libc::c_int = 22;
/// Offsets in `struct seccomp_data`.
const NR: u32 = 0;
const ARCH: u32 = 4;

fn stmt(code: u32, k: u32) -> libc::sock_filter {
    libc::sock_filter {
        code: code as u16,
        jt: 0,
        jf: 0,
        k,
    }
}

fn jump(code: u32, k: u32, jt: u8, jf: u8) -> libc::sock_filter {
    libc::sock_filter {
        code: code as u16,
        jt,
        jf,
        k,
    }
}

/// The filter program.
pub fn program() -> Vec<libc::sock_filter> {
    use libc::{BPF_ABS, BPF_JEQ, BPF_JGE, BPF_JMP, BPF_K, BPF_LD, BPF_RET, BPF_W};
    let trace = libc::SECCOMP_RET_TRACE;
    let calls = watched();
    let mut p = vec![
        stmt(BPF_LD | BPF_W | BPF_ABS, ARCH),
        jump(BPF_JMP | BPF_JEQ | BPF_K, AUDIT_ARCH, 1, 0),
        stmt(BPF_RET | BPF_K, trace | FOREIGN as u32),
        stmt(BPF_LD | BPF_W | BPF_ABS, NR),
    ];
    if X32_BIT != 0 {
        p.push(jump(BPF_JMP | BPF_JGE | BPF_K, X32_BIT, 0, 1));
        p.push(stmt(BPF_RET | BPF_K, trace | FOREIGN as u32));
    }
    // One test a call: equal jumps to the shared "trace" return at the end.
    let n = calls.len();
    for (i, &nr) in calls.iter().enumerate() {
        let to_trace = (n - i) as u8; // past the remaining tests and the "allow"
        p.push(jump(BPF_JMP | BPF_JEQ | BPF_K, nr as u32, to_trace, 0));
    }
    p.push(stmt(BPF_RET | BPF_K, libc::SECCOMP_RET_ALLOW));
    p.push(stmt(BPF_RET | BPF_K, trace | NATIVE as u32));
    p
}

/// Installs the filter on this thread and every thread and process it starts after.
/// Err: the kernel refused (no seccomp, or a sandbox that forbids it).
pub fn install() -> Result<(), String> {
    let prog = program();
    let fprog = libc::sock_fprog {
        len: prog.len() as u16,
        filter: prog.as_ptr() as *mut libc::sock_filter,
    };
    // SAFETY: plain prctl calls; `fprog` points at `prog`, alive for the call (the kernel
    // copies the program).
    unsafe {
        if libc::prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 {
            return Err(format!("no_new_privs: {}", std::io::Error::last_os_error()));
        }
        if libc::prctl(
            PR_SET_SECCOMP,
            libc::SECCOMP_MODE_FILTER as libc::c_ulong,
            &fprog as *const libc::sock_fprog,
            0,
            0,
        ) != 0
        {
            return Err(format!("seccomp: {}", std::io::Error::last_os_error()));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_jump_lands_inside_the_program() {
        let p = program();
        assert!(p.len() < 256, "jump offsets fit a byte");
        for (i, ins) in p.iter().enumerate() {
            if ins.code as u32 & 0x07 == libc::BPF_JMP {
                assert!(i + 1 + (ins.jt as usize) < p.len(), "{i}");
                assert!(i + 1 + (ins.jf as usize) < p.len(), "{i}");
            }
        }
        let last = p.last().unwrap();
        assert_eq!(last.k, libc::SECCOMP_RET_TRACE | NATIVE as u32);
    }
}
