//! What names a build that failed. The implementation names no kernels after a failure, so
//! the record would show an unnamed program; this module reads the kernel names the source
//! text declares (`kernel`/`__kernel` functions, outside comments and string literals) and
//! the first error line of the build log, so that the exit summary and `clshim report` can
//! say which program failed and why. Both work on bytes the implementation gave back and
//! are bounded: at most [`NAMES_KEPT`] names and [`ERROR_KEPT`] characters.

/// Kernel names kept from one source text.
pub const NAMES_KEPT: usize = 64;
/// Characters kept of the error line.
pub const ERROR_KEPT: usize = 300;

/// The source's words (identifiers) and the single characters `(` between them, with
/// comments, string and character literals and preprocessor lines left out.
fn words(src: &[u8]) -> Vec<&[u8]> {
    let mut out = Vec::new();
    let mut i = 0;
    // Only blanks since the last newline: a `#` there starts a directive.
    let mut line_start = true;
    while i < src.len() {
        let c = src[i];
        let next = src.get(i + 1).copied();
        if c == b'/' && next == Some(b'/') {
            while i < src.len() && src[i] != b'\n' {
                i += 1;
            }
        } else if c == b'/' && next == Some(b'*') {
            i += 2;
            while i + 1 < src.len() && !(src[i] == b'*' && src[i + 1] == b'/') {
                i += 1;
            }
            i = (i + 2).min(src.len());
            line_start = false;
        } else if c == b'"' || c == b'\'' {
            i += 1;
            while i < src.len() && src[i] != c && src[i] != b'\n' {
                i += if src[i] == b'\\' { 2 } else { 1 };
            }
            i = (i + 1).min(src.len());
            line_start = false;
        } else if c == b'#' && line_start {
            // A directive, its continued lines included, up to its newline.
            while i < src.len() && !(src[i] == b'\n' && src[i - 1] != b'\\') {
                i += 1;
            }
        } else if c.is_ascii_alphabetic() || c == b'_' {
            let start = i;
            while i < src.len() && (src[i].is_ascii_alphanumeric() || src[i] == b'_') {
                i += 1;
            }
            out.push(&src[start..i]);
            line_start = false;
        } else {
            if matches!(c, b'(' | b')' | b';' | b'{') {
                out.push(&src[i..i + 1]);
            }
            if c == b'\n' {
                line_start = true;
            } else if !c.is_ascii_whitespace() {
                line_start = false;
            }
            i += 1;
        }
    }
    out
}

/// The kernel functions `src` declares, in order, each once.
pub fn kernel_names(src: &[u8]) -> Vec<String> {
    let w = words(src);
    let mut names: Vec<String> = Vec::new();
    let mut i = 0;
    while i < w.len() && names.len() < NAMES_KEPT {
        if w[i] == b"kernel" || w[i] == b"__kernel" {
            // Qualifiers and attributes up to `void`, then the name and its `(`.
            let mut j = i + 1;
            let mut depth = 0usize;
            while j < w.len() && (depth > 0 || w[j] != b"void") && w[j] != b";" && w[j] != b"{" {
                match w[j] {
                    b"(" => depth += 1,
                    b")" => depth = depth.saturating_sub(1),
                    _ => {}
                }
                j += 1;
            }
            if j + 2 < w.len() && w[j] == b"void" && w[j + 2] == b"(" {
                let name = String::from_utf8_lossy(w[j + 1]).into_owned();
                if !names.contains(&name) {
                    names.push(name);
                }
                i = j + 2;
                continue;
            }
        }
        i += 1;
    }
    names
}

/// The first line of a build log that says `error` (else its first line that is not
/// blank), trimmed and cut to [`ERROR_KEPT`] characters.
pub fn first_error(log: &[u8]) -> Option<String> {
    let text = String::from_utf8_lossy(log);
    let lines = || text.lines().map(str::trim).filter(|l| !l.is_empty());
    let line = lines()
        .find(|l| l.to_ascii_lowercase().contains("error"))
        .or_else(|| lines().next())?;
    Some(line.chars().take(ERROR_KEPT).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_of_declared_kernels_only() {
        let src = br#"
#define K(x) kernel void fake_##x(void)
// kernel void commented(int a)
/* __kernel void also_commented() */
constant char *s = "kernel void in_a_string(";
__kernel __attribute__((reqd_work_group_size(64, 1, 1))) void sum(global float *a)
{ a[0] = 1; }
kernel void
   scale (global float *a, float f) { a[0] *= f; }
void helper(void) {}
kernel void sum(global float *b) {}
"#;
        assert_eq!(kernel_names(src), ["sum", "scale"]);
        assert!(kernel_names(b"").is_empty());
        assert!(kernel_names(b"kernel void").is_empty());
        assert!(kernel_names(b"\"unterminated").is_empty());
    }

    #[test]
    fn the_first_error_line() {
        let log = b"<source>:2:1: warning: unused\n<source>:3:5: error: use of undeclared identifier 'y'\n  y = 1;\n";
        assert_eq!(
            first_error(log).unwrap(),
            "<source>:3:5: error: use of undeclared identifier 'y'"
        );
        assert_eq!(
            first_error(b"\n  something odd\n").unwrap(),
            "something odd"
        );
        assert_eq!(first_error(b"  \n"), None);
        assert_eq!(first_error(&[b'e'; 5000]).unwrap().len(), ERROR_KEPT);
    }
}
