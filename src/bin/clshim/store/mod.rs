//! The native store as the command sees it, apart from making its entries (`warm/`):
//! `folders` makes its folders the user's alone whatever the umask.

pub mod folders;
