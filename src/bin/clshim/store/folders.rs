//! The store's folders as the command makes them: the user's alone (0700) whatever the
//! umask, as the library makes them (`store::files` there), since the library refuses a
//! store its group may write, and a umask can also take the owner's own bits.

use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::Path;

/// Folders of the store: the owner's only.
pub const DIR_MODE: u32 = 0o700;

/// Makes `path` and each missing folder above it with exactly [`DIR_MODE`]; folders that
/// exist are left as they are. The umask can take bits from the mode a folder is made with
/// (under `umask 0277` a folder made 0700 is 0500, a store its owner cannot write), so
/// each folder made is set to the mode after, through a descriptor opened without
/// following a link: nothing put in its place meanwhile is changed instead.
pub fn make_private(path: &Path) -> std::io::Result<()> {
    let missing: Vec<&Path> = path
        .ancestors()
        .take_while(|a| !a.as_os_str().is_empty() && a.symlink_metadata().is_err())
        .collect();
    for dir in missing.into_iter().rev() {
        match std::fs::DirBuilder::new().mode(DIR_MODE).create(dir) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(e),
        }
        std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_DIRECTORY | libc::O_NOFOLLOW)
            .open(dir)?
            .set_permissions(std::fs::Permissions::from_mode(DIR_MODE))?;
    }
    Ok(())
}
