//! What the native store tests look at: a store's entries and requests, and waiting for a
//! warm step that runs in the background (the node's warm service) to finish; and how the
//! program cache's tests start a program, with it or without clshim.

use std::path::{Path, PathBuf};
use std::process::Command;

/// `program` without clshim (`mode` None), or under `clshim run --program-cache --mode
/// MODE` recording into `traces`; the caller adds its arguments and environment.
pub fn program_cache_command(program: &Path, mode: Option<&str>, traces: &Path) -> Command {
    let Some(m) = mode else {
        return Command::new(program);
    };
    let mut c = super::clshim();
    c.args(["run", "--lib", super::s(&super::shim_path()), "--mode", m])
        .args(["--program-cache", "--trace-dir", super::s(traces), "--"])
        .arg(program);
    c
}

/// `clshim warm` on `store` with the test's library, and `env`.
pub fn warm_out(store: &Path, env: &[(&str, &str)]) -> std::process::Output {
    let lib = super::shim_path();
    super::clshim_out(
        &["warm", "--store", super::s(store), "--lib", super::s(&lib)],
        env,
    )
}

/// The files of `dir` whose names end with `suffix`, sorted.
pub fn store_files(dir: &Path, suffix: &str) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .map(|rd| {
            rd.flatten()
                .map(|e| e.path())
                .filter(|p| p.to_string_lossy().ends_with(suffix))
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v
}

pub fn entries(store: &Path) -> Vec<PathBuf> {
    store_files(store, ".bin")
}

pub fn requests(store: &Path) -> Vec<PathBuf> {
    store_files(&store.join("requests"), ".req")
}

/// A claim of a warm step of this host (as `clshim_format::store::Claim` writes it) held by
/// the process `pid`.
pub fn claim_text(pid: i32) -> String {
    let read = |p: &str| std::fs::read_to_string(p).unwrap().trim().to_string();
    let ns = std::fs::read_link("/proc/self/ns/pid").unwrap();
    let ns = ns
        .to_str()
        .unwrap()
        .trim_start_matches("pid:")
        .trim_matches(|c| c == '[' || c == ']')
        .to_string();
    format!(
        "clshim-claim 1 {}/{}/{ns} {pid}\n",
        read("/proc/sys/kernel/hostname"),
        read("/proc/sys/kernel/random/boot_id")
    )
}

/// Waits (at most two minutes) until `store` holds `n` entries and no request: a warm
/// step started in the background has done its work.
pub fn wait_for_entries(store: &Path, n: usize) {
    let until = std::time::Instant::now() + std::time::Duration::from_secs(120);
    while (entries(store).len() < n || !requests(store).is_empty())
        && std::time::Instant::now() < until
    {
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    assert_eq!(entries(store).len(), n, "entries after the background step");
    assert!(requests(store).is_empty(), "{:?}", requests(store));
}

/// A folder of ICD files naming a copy of pocl's library whose GNU build-id differs: the
/// same driver as another build. pocl finds its device libraries in `pocl/` beside its
/// own library, and its headers and kernel library in `../../share/pocl` from it, so the
/// copy gets the same neighbours.
pub fn pocl_copy(d: &super::Scratch) -> PathBuf {
    pocl_copy_in(d, false)
}

/// As [`pocl_copy`], with kernel libraries and headers of its own: copies of pocl's
/// `share/pocl/*.bc` and `share/pocl/include/` in `driver/share/pocl`, its other files
/// linked, for a test to change as a reinstall under the same libpocl would. Returns the
/// ICD folder.
pub fn pocl_copy_with_kernel_library(d: &super::Scratch) -> PathBuf {
    pocl_copy_in(d, true)
}

fn pocl_copy_in(d: &super::Scratch, own_library: bool) -> PathBuf {
    let lib = pocl_library();
    let mut bytes = std::fs::read(&lib).unwrap();
    flip_build_id(&mut bytes);
    let libdir = d.path("driver/lib/arch");
    std::fs::create_dir_all(&libdir).unwrap();
    let real = lib.parent().unwrap();
    std::os::unix::fs::symlink(real.join("pocl"), libdir.join("pocl")).unwrap();
    let share = real.join("../../share").canonicalize().unwrap();
    if own_library {
        let pocl = d.path("driver/share/pocl");
        std::fs::create_dir_all(&pocl).unwrap();
        for e in std::fs::read_dir(share.join("pocl")).unwrap().flatten() {
            let to = pocl.join(e.file_name());
            if e.file_name().to_string_lossy().ends_with(".bc") {
                std::fs::copy(e.path(), &to).unwrap();
            } else if e.file_name() == "include" {
                // A folder of its own (its headers copied), whose times a test may change.
                std::fs::create_dir(&to).unwrap();
                for h in std::fs::read_dir(e.path()).unwrap().flatten() {
                    std::fs::copy(h.path(), to.join(h.file_name())).unwrap();
                }
            } else {
                std::os::unix::fs::symlink(e.path(), &to).unwrap();
            }
        }
    } else {
        std::os::unix::fs::symlink(share, d.path("driver/share")).unwrap();
    }
    let copy = libdir.join("libpocl-copy.so");
    std::fs::write(&copy, &bytes).unwrap();
    let vendors = d.path("vendors");
    std::fs::create_dir_all(&vendors).unwrap();
    std::fs::write(
        vendors.join("pocl-copy.icd"),
        format!("{}\n", copy.display()),
    )
    .unwrap();
    vendors
}

/// Replaces every kernel library variant in `share` (a copy of pocl's `share/pocl`) with
/// the generic one, as a reinstall of another library under the same libpocl would: the
/// programs pocl links from then on differ.
pub fn replace_kernel_library(share: &Path) {
    let generic = share.join("kernel-x86_64-pc-linux-gnu-GENERIC.bc");
    assert!(generic.exists(), "pocl's generic kernel library");
    for e in std::fs::read_dir(share).unwrap().flatten() {
        if e.file_name().to_string_lossy().ends_with(".bc") && e.path() != generic {
            std::fs::remove_file(e.path()).unwrap();
            std::fs::copy(&generic, e.path()).unwrap();
        }
    }
}

/// pocl's library as the system's ICD file names it.
pub fn pocl_library() -> PathBuf {
    let icd = std::fs::read_to_string("/etc/OpenCL/vendors/pocl.icd").expect("pocl.icd");
    let name = icd.trim();
    let p = Path::new(name);
    if p.is_absolute() {
        return p.to_path_buf();
    }
    ["/usr/lib/x86_64-linux-gnu", "/usr/lib64", "/usr/lib"]
        .iter()
        .map(|d| Path::new(d).join(name))
        .find(|p| p.exists())
        .expect("pocl's library")
}

/// Flips a byte of the ELF file's GNU build-id note (found through its program headers).
pub fn flip_build_id(elf: &mut [u8]) {
    let u16_at = |b: &[u8], at: usize| u16::from_le_bytes(b[at..at + 2].try_into().unwrap());
    let u32_at = |b: &[u8], at: usize| u32::from_le_bytes(b[at..at + 4].try_into().unwrap());
    let u64_at = |b: &[u8], at: usize| u64::from_le_bytes(b[at..at + 8].try_into().unwrap());
    let phoff = u64_at(elf, 0x20) as usize;
    let (phentsize, phnum) = (u16_at(elf, 0x36) as usize, u16_at(elf, 0x38) as usize);
    for i in 0..phnum {
        let ph = phoff + i * phentsize;
        if u32_at(elf, ph) != 4 {
            continue; // not PT_NOTE
        }
        let (off, size) = (u64_at(elf, ph + 8) as usize, u64_at(elf, ph + 32) as usize);
        let mut at = off;
        while at + 12 <= off + size {
            let (namesz, descsz, kind) = (
                u32_at(elf, at) as usize,
                u32_at(elf, at + 4) as usize,
                u32_at(elf, at + 8),
            );
            let name_at = at + 12;
            let desc_at = name_at + ((namesz + 3) & !3);
            if kind == 3 && &elf[name_at..name_at + 4] == b"GNU\0" {
                elf[desc_at] ^= 0xff;
                return;
            }
            at = desc_at + ((descsz + 3) & !3);
        }
    }
    panic!("no GNU build-id note");
}

/// A request file's parts, read with clshim_format::store's layout on their own (not with
/// clshim's code), so that a test can plant what clshim never writes (a variable no warm
/// step sets, another working directory) under a valid checksum.
pub struct RequestFile {
    /// Magic, version, flags, key, fingerprint and driver.
    pub head: Vec<u8>,
    pub recipe: Vec<u8>,
    pub cwd: Vec<u8>,
    /// (name, value), sorted by name as clshim writes them.
    pub env: Vec<(Vec<u8>, Vec<u8>)>,
}

impl RequestFile {
    pub fn read(path: &Path) -> RequestFile {
        let b = std::fs::read(path).unwrap();
        assert_eq!(&b[..8], b"CLSHIMRQ", "{}", path.display());
        let mut at = 40;
        let mut take = |len_bytes: usize| {
            let mut n = [0u8; 8];
            n[..len_bytes].copy_from_slice(&b[at..at + len_bytes]);
            let n = u64::from_le_bytes(n) as usize;
            let part = b[at + len_bytes..at + len_bytes + n].to_vec();
            at += len_bytes + n;
            part
        };
        let recipe = take(8);
        let cwd = take(8);
        let count = u32::from_le_bytes(b[at..at + 4].try_into().unwrap());
        at += 4;
        let mut env = Vec::new();
        for _ in 0..count {
            let mut field = || {
                let n = u32::from_le_bytes(b[at..at + 4].try_into().unwrap()) as usize;
                let v = b[at + 4..at + 4 + n].to_vec();
                at += 4 + n;
                v
            };
            let name = field();
            env.push((name, field()));
        }
        assert_eq!(at + 8, b.len(), "{}: the checksum ends it", path.display());
        RequestFile {
            head: b[..40].to_vec(),
            recipe,
            cwd,
            env,
        }
    }

    /// Writes the request to `path` (0600, as clshim does), with its checksum.
    pub fn write(&self, path: &Path) {
        let mut out = self.head.clone();
        for part in [&self.recipe, &self.cwd] {
            out.extend_from_slice(&(part.len() as u64).to_le_bytes());
            out.extend_from_slice(part);
        }
        out.extend_from_slice(&(self.env.len() as u32).to_le_bytes());
        for (name, value) in &self.env {
            for part in [name, value] {
                out.extend_from_slice(&(part.len() as u32).to_le_bytes());
                out.extend_from_slice(part);
            }
        }
        let sum = super::fnv1a64_u64(&out);
        out.extend_from_slice(&sum.to_le_bytes());
        std::fs::write(path, out).unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600)).unwrap();
    }
}

/// The user another user's files belong to in the tests: `nobody`.
pub const NOBODY: u32 = 65534;

/// Gives `path` (not following a link) to [`NOBODY`]: false where this process may not
/// (it is not root; CI runs the tests as root), after a line saying what is left out.
pub fn give_to_nobody(path: &Path) -> bool {
    match std::os::unix::fs::lchown(path, Some(NOBODY), None) {
        Ok(()) => true,
        Err(e) => {
            eprintln!(
                "note: cannot give {} to uid {NOBODY} ({e}): run as root to check another \
                 user's files",
                path.display()
            );
            false
        }
    }
}

/// Sets `path`'s permission bits.
pub fn chmod(path: &Path, mode: u32) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
}
