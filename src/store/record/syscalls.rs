//! Which system calls touch a file by its name, on this machine's architecture, and where
//! each keeps its arguments: the seccomp filter stops the compile at exactly these, and
//! the tracer reads each one's names and flags from the registers. A call of this list the
//! tracer cannot decode, and any call made through another architecture's entry (a 32-bit
//! `int 0x80` on x86-64, x32), is never ignored: the watch says it could not follow it, and
//! the build it was part of is not kept. The numbers are the kernel's (`libc::SYS_*`).

/// How one system call names its file(s). Argument indices are into the six syscall
/// arguments; `dir` is the index of a directory descriptor, None for calls relative to the
/// working directory only.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Shape {
    /// open/openat/creat/openat2: `flags` None for creat (write, create, truncate), and for
    /// openat2, whose flags sit in the `struct open_how` at `how`.
    Open {
        dir: Option<usize>,
        path: usize,
        flags: Option<usize>,
        how: Option<usize>,
    },
    /// stat/lstat/newfstatat/statx: `nofollow` a fixed choice (lstat) or the index of an
    /// AT_* flags argument.
    Stat {
        dir: Option<usize>,
        path: usize,
        follow: Follow,
    },
    /// access/faccessat/faccessat2: existence (or permission) of a name, following links.
    Access { dir: Option<usize>, path: usize },
    /// readlink/readlinkat: the link's text lands in `buf`, the length is the return.
    Readlink {
        dir: Option<usize>,
        path: usize,
        buf: usize,
    },
    /// execve/execveat: a program the compile starts (its file is an input).
    Exec { dir: Option<usize>, path: usize },
    /// A call that changes the name it is given (mkdir, unlink, rmdir, mknod, truncate,
    /// chmod, chown, utimes...): the compile's own output if it made that name.
    Change { dir: Option<usize>, path: usize },
    /// rename/renameat/renameat2 and link/linkat: the first name (gone, or linked) and the
    /// second (made).
    Two {
        from_dir: Option<usize>,
        from: usize,
        to_dir: Option<usize>,
        to: usize,
    },
    /// symlink/symlinkat: the link made; its text is not a name the compile reads.
    Symlink { dir: Option<usize>, path: usize },
    /// chdir: later relative names resolve elsewhere.
    Chdir,
    /// statfs and the like: facts about the filesystem, never a file's content.
    Ignore,
    /// A call that reads names or metadata in a way the watch does not follow (xattrs,
    /// handles, mounts): the build is not kept.
    Unsupported,
}

/// Whether a stat-like call follows a final symbolic link.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Follow {
    Always,
    Never,
    /// Unless `AT_SYMLINK_NOFOLLOW` is set in this argument.
    UnlessFlag(usize),
}

const D0: Option<usize> = Some(0);

/// The shape of system call `nr`, or None for a call that names no file.
pub fn shape(nr: i64) -> Option<Shape> {
    use libc::*;
    use Shape::*;
    let s = match nr {
        n if n == SYS_openat => Open {
            dir: D0,
            path: 1,
            flags: Some(2),
            how: None,
        },
        n if n == SYS_openat2 => Open {
            dir: D0,
            path: 1,
            flags: None,
            how: Some(2),
        },
        n if n == SYS_newfstatat => Stat {
            dir: D0,
            path: 1,
            follow: Follow::UnlessFlag(3),
        },
        n if n == SYS_statx => Stat {
            dir: D0,
            path: 1,
            follow: Follow::UnlessFlag(2),
        },
        n if n == SYS_faccessat || n == SYS_faccessat2 => Access { dir: D0, path: 1 },
        n if n == SYS_readlinkat => Readlink {
            dir: D0,
            path: 1,
            buf: 2,
        },
        n if n == SYS_execve => Exec { dir: None, path: 0 },
        n if n == SYS_execveat => Exec { dir: D0, path: 1 },
        n if n == SYS_mkdirat
            || n == SYS_mknodat
            || n == SYS_unlinkat
            || n == SYS_fchmodat
            || n == SYS_fchownat
            || n == SYS_utimensat =>
        {
            Change { dir: D0, path: 1 }
        }
        n if n == SYS_truncate => Change { dir: None, path: 0 },
        n if n == SYS_renameat2 || n == SYS_linkat => Two {
            from_dir: D0,
            from: 1,
            to_dir: Some(2),
            to: 3,
        },
        n if n == SYS_symlinkat => Symlink {
            dir: Some(1),
            path: 2,
        },
        n if n == SYS_chdir || n == SYS_fchdir || n == SYS_chroot => Chdir,
        n if n == SYS_statfs => Ignore,
        n if n == SYS_getxattr
            || n == SYS_lgetxattr
            || n == SYS_listxattr
            || n == SYS_llistxattr
            || n == SYS_setxattr
            || n == SYS_lsetxattr
            || n == SYS_removexattr
            || n == SYS_lremovexattr
            || n == SYS_name_to_handle_at
            || n == SYS_open_by_handle_at =>
        {
            Unsupported
        }
        _ => return legacy(nr),
    };
    Some(s)
}

/// The calls only x86-64 keeps from before the `*at` family.
#[cfg(target_arch = "x86_64")]
fn legacy(nr: i64) -> Option<Shape> {
    use libc::*;
    use Shape::*;
    let s = match nr {
        n if n == SYS_open => Open {
            dir: None,
            path: 0,
            flags: Some(1),
            how: None,
        },
        n if n == SYS_creat => Open {
            dir: None,
            path: 0,
            flags: None,
            how: None,
        },
        n if n == SYS_stat => Stat {
            dir: None,
            path: 0,
            follow: Follow::Always,
        },
        n if n == SYS_lstat => Stat {
            dir: None,
            path: 0,
            follow: Follow::Never,
        },
        n if n == SYS_access => Access { dir: None, path: 0 },
        n if n == SYS_readlink => Readlink {
            dir: None,
            path: 0,
            buf: 1,
        },
        n if n == SYS_mkdir
            || n == SYS_rmdir
            || n == SYS_unlink
            || n == SYS_mknod
            || n == SYS_chmod
            || n == SYS_chown
            || n == SYS_lchown
            || n == SYS_utime
            || n == SYS_utimes =>
        {
            Change { dir: None, path: 0 }
        }
        n if n == SYS_futimesat => Change { dir: D0, path: 1 },
        n if n == SYS_rename || n == SYS_link => Two {
            from_dir: None,
            from: 0,
            to_dir: None,
            to: 1,
        },
        n if n == SYS_renameat => Two {
            from_dir: D0,
            from: 1,
            to_dir: Some(2),
            to: 3,
        },
        n if n == SYS_symlink => Symlink { dir: None, path: 1 },
        _ => return None,
    };
    Some(s)
}

#[cfg(not(target_arch = "x86_64"))]
fn legacy(_nr: i64) -> Option<Shape> {
    None
}

/// Every system call the filter stops at: those with a shape, and the marker's.
pub fn watched() -> Vec<i64> {
    // Every number the kernel may give a call on this architecture is below this.
    (0..1024).filter(|&nr| shape(nr).is_some()).collect()
}

/// The seccomp audit architecture of this build (what `seccomp_data.arch` says for a call
/// made through the native entry).
#[cfg(target_arch = "x86_64")]
pub const AUDIT_ARCH: u32 = 0xC000_003E;
#[cfg(target_arch = "aarch64")]
pub const AUDIT_ARCH: u32 = 0xC000_00B7;

/// On x86-64, x32 calls are native ones with this bit set in their number.
#[cfg(target_arch = "x86_64")]
pub const X32_BIT: u32 = 0x4000_0000;
#[cfg(not(target_arch = "x86_64"))]
pub const X32_BIT: u32 = 0;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_call_that_names_a_file_is_watched() {
        let w = watched();
        for nr in [
            libc::SYS_openat,
            libc::SYS_openat2,
            libc::SYS_newfstatat,
            libc::SYS_statx,
            libc::SYS_faccessat,
            libc::SYS_faccessat2,
            libc::SYS_readlinkat,
            libc::SYS_execve,
            libc::SYS_mkdirat,
            libc::SYS_unlinkat,
            libc::SYS_renameat2,
            libc::SYS_linkat,
            libc::SYS_symlinkat,
            libc::SYS_getxattr,
        ] {
            assert!(w.contains(&nr), "{nr}");
        }
        #[cfg(target_arch = "x86_64")]
        for nr in [
            libc::SYS_open,
            libc::SYS_stat,
            libc::SYS_lstat,
            libc::SYS_access,
            libc::SYS_readlink,
            libc::SYS_rename,
            libc::SYS_creat,
        ] {
            assert!(w.contains(&nr), "{nr}");
        }
        for nr in [
            libc::SYS_read,
            libc::SYS_write,
            libc::SYS_mmap,
            libc::SYS_futex,
        ] {
            assert!(!w.contains(&nr), "{nr}");
        }
    }
}
