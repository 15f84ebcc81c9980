//! Who this process is, for records and file names: pid, parent, host, executable,
//! arguments, the MPI rank and size when a launcher's environment variable names them, and
//! a random instance id. Gathered once per process (again in a forked child, whose pid
//! differs). The instance id tells apart processes that share a host and a pid: those in
//! different pid namespaces (containers, where many applications run as pid 1), and a pid
//! reused over a long job.

#[derive(Clone, Debug)]
pub struct Identity {
    pub pid: u32,
    pub ppid: u32,
    pub host: String,
    pub exe: String,
    pub argv: Vec<String>,
    pub rank: Option<u64>,
    pub size: Option<u64>,
    pub rank_source: Option<&'static str>,
    /// 16 lowercase hex digits, random per process.
    pub instance: String,
}

/// 64 random bits from the kernel, or None where it has none to give.
#[cfg(target_os = "linux")]
fn kernel_random() -> Option<u64> {
    let mut buf = [0u8; 8];
    // SAFETY: the buffer is valid for its length; GRND_NONBLOCK never waits for entropy.
    let n = unsafe { libc::getrandom(buf.as_mut_ptr().cast(), buf.len(), libc::GRND_NONBLOCK) };
    (n == buf.len() as isize).then(|| u64::from_ne_bytes(buf))
}

#[cfg(not(target_os = "linux"))]
fn kernel_random() -> Option<u64> {
    let mut buf = [0u8; 8];
    // SAFETY: the buffer is valid for its length (getentropy takes up to 256 bytes).
    let ok = unsafe { libc::getentropy(buf.as_mut_ptr().cast(), buf.len()) } == 0;
    ok.then(|| u64::from_ne_bytes(buf))
}

/// splitmix64's finaliser: spreads every input bit over the output.
fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// A new instance id: kernel randomness mixed with the time, the pid and an address, so it
/// differs between processes even where the kernel gives no randomness.
pub fn new_instance() -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0);
    let local = 0u8;
    let here = &local as *const u8 as u64;
    let pid = u64::from(std::process::id());
    let x = mix(kernel_random().unwrap_or(0) ^ mix(nanos ^ pid.rotate_left(32) ^ mix(here)));
    format!("{x:016x}")
}

pub use clshim_format::ranks::detect_rank;

fn hostname() -> String {
    let mut buf = [0u8; 256];
    // SAFETY: the buffer is valid for its length; gethostname NUL-terminates within it.
    let ok =
        unsafe { libc::gethostname(buf.as_mut_ptr() as *mut libc::c_char, buf.len() - 1) } == 0;
    let end = buf.iter().position(|&b| b == 0).unwrap_or(0);
    if ok && end > 0 {
        String::from_utf8_lossy(&buf[..end]).into_owned()
    } else {
        "unknown-host".to_string()
    }
}

impl Identity {
    pub fn current() -> Identity {
        let (rank, size, rank_source) =
            detect_rank(|n| std::env::var_os(n).map(|v| v.to_string_lossy().into_owned()));
        Identity {
            pid: std::process::id(),
            // SAFETY: getppid cannot fail.
            ppid: unsafe { libc::getppid() } as u32,
            host: hostname(),
            exe: std::env::current_exe()
                .map(|p| p.display().to_string())
                .unwrap_or_default(),
            argv: std::env::args_os()
                .map(|a| a.to_string_lossy().into_owned())
                .collect(),
            rank,
            size,
            rank_source,
            instance: new_instance(),
        }
    }

    /// `clshim-<host>-r<rank>-p<pid>`, or `clshim-<host>-p<pid>` without a rank: unique
    /// per host, rank and pid; safe as a file name.
    pub fn file_stem(&self) -> String {
        let host: String = self
            .host
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || c == '-' || c == '.' {
                    c
                } else {
                    '_'
                }
            })
            .collect();
        match self.rank {
            Some(rank) => format!("clshim-{host}-r{rank}-p{}", self.pid),
            None => format!("clshim-{host}-p{}", self.pid),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lookup(pairs: &'static [(&'static str, &'static str)]) -> impl Fn(&str) -> Option<String> {
        move |n| {
            pairs
                .iter()
                .find(|(k, _)| *k == n)
                .map(|(_, v)| v.to_string())
        }
    }

    #[test]
    fn rank_comes_from_the_most_specific_launcher_variable() {
        assert_eq!(detect_rank(lookup(&[])), (None, None, None));
        assert_eq!(
            detect_rank(lookup(&[
                ("PMI_RANK", "3"),
                ("PMI_SIZE", "4"),
                ("MPI_LOCALRANKID", "1")
            ])),
            (Some(3), Some(4), Some("PMI_RANK"))
        );
        assert_eq!(
            detect_rank(lookup(&[
                ("OMPI_COMM_WORLD_RANK", "7"),
                ("OMPI_COMM_WORLD_SIZE", "16"),
                ("PMI_RANK", "2")
            ])),
            (Some(7), Some(16), Some("OMPI_COMM_WORLD_RANK"))
        );
        assert_eq!(
            detect_rank(lookup(&[("SLURM_PROCID", "x"), ("PALS_RANKID", "5")])),
            (Some(5), None, Some("PALS_RANKID"))
        );
        assert_eq!(
            detect_rank(lookup(&[("MPI_LOCALRANKID", "2")])),
            (Some(2), None, Some("MPI_LOCALRANKID"))
        );
    }

    #[test]
    fn instance_ids_are_sixteen_hex_digits_and_differ() {
        let ids: std::collections::HashSet<String> = (0..1000).map(|_| new_instance()).collect();
        assert_eq!(ids.len(), 1000);
        for id in &ids {
            assert_eq!(id.len(), 16, "{id}");
            assert!(
                id.bytes()
                    .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)),
                "{id}"
            );
        }
    }

    #[test]
    fn file_stem_is_a_safe_name() {
        let id = Identity {
            pid: 42,
            ppid: 1,
            host: "node 1/x".into(),
            exe: String::new(),
            argv: vec![],
            rank: Some(3),
            size: None,
            rank_source: None,
            instance: new_instance(),
        };
        assert_eq!(id.file_stem(), "clshim-node_1_x-r3-p42");
        assert_eq!(
            Identity { rank: None, ..id }.file_stem(),
            "clshim-node_1_x-p42"
        );
    }
}
