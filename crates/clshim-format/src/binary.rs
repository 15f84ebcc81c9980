//! The clshim binary's envelope, as facts the library (which writes and loads clshim
//! binaries) and the `clshim` command (which finds them in applications' caches) both
//! need: the magic that starts one, the format versions, the sizes of its fixed header and
//! trailer, and the largest body a reader accepts. The layout itself (`magic` · `version
//! u32` · `flags u32` · `device fingerprint u64` · `body length u64` · body · FNV-1a 64
//! checksum of everything before it, little-endian) is `cl-headers/clshim.h`'s and the
//! library's `container` module's.

pub const MAGIC: &[u8; 8] = b"CLSHIMB\0";
/// The version clshim writes for programs whose recipe it recorded (each part once).
pub const VERSION: u32 = 3;
/// Recipes with nested inputs, still read.
pub const VERSION_TREE: u32 = 2;
/// The source-only version, still read, and written for programs whose options clshim
/// did not see.
pub const VERSION_SOURCE: u32 = 1;
/// Magic, version, flags, device fingerprint, body length.
pub const HEADER: usize = 8 + 4 + 4 + 8 + 8;
/// The checksum.
pub const TRAILER: usize = 8;
/// The largest body (a source, or an encoded recipe) a clshim binary may carry: far beyond
/// any real kernel source, and small enough that a corrupt length can never make a reader
/// allocate without bound.
pub const MAX_BODY: usize = 256 << 20;
