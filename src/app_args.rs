//! The application's pointers, as the entry points (`intercept`) hand them on: the one door
//! through which clshim reads or writes the application's memory. An [`OutParam`] is an
//! out-parameter the application may omit (`errcode_ret`, `param_value_size_ret`, an entry
//! of `binary_status`); an [`AppArray`] is an array with the count the application gave
//! (device lists, input programs, binaries and their lengths), read only when the caller
//! states that the implementation accepted the call, and never beyond that count; an
//! [`AppBuffer`] is a `param_value` with its size; an [`OutArray`] is an array the
//! implementation fills for the application (`binary_status`); an [`AppBytes`] is a run of
//! bytes with its length (a binary, an IL module, a source string given with a length) and
//! an [`AppCStr`] a NUL-terminated string (a source string without a length, build
//! options, a kernel name), both read as borrowed slices that live as long as the call.
//! Each is made once, in `unsafe`, from
//! what the OpenCL API requires of applications, so that what reads or writes through it
//! can check NULL and size in one place. Writes and reads are element by element and
//! unaligned: nothing requires the application's memory to be aligned for its type.

use std::ffi::{c_char, c_void, CStr};
use std::marker::PhantomData;

/// An out-parameter the application may pass as NULL.
pub struct OutParam<T> {
    ptr: *mut T,
}

impl<T: Copy> OutParam<T> {
    /// # Safety
    /// `ptr` is NULL or writable for one `T`, as the OpenCL API requires of applications,
    /// for as long as the `OutParam` lives (the intercepted call).
    pub unsafe fn new(ptr: *mut T) -> OutParam<T> {
        OutParam { ptr }
    }

    /// Writes `value`, unless the application omitted the parameter.
    pub fn set(&self, value: T) {
        if !self.ptr.is_null() {
            // SAFETY: non-NULL, so writable for one T (`new`'s contract); unaligned, as the
            // application's memory need not be aligned.
            unsafe { self.ptr.write_unaligned(value) };
        }
    }

    /// The pointer, to hand on unchanged to the implementation.
    pub fn as_ptr(&self) -> *mut T {
        self.ptr
    }

    /// What the implementation wrote there, None when the application omitted it.
    ///
    /// # Safety
    /// The implementation wrote it (it returned success for a call that writes it).
    pub unsafe fn written(&self) -> Option<T> {
        // SAFETY: non-NULL, so writable for one T (`new`'s contract), and written (this
        // function's contract); unaligned, as the application's memory need not be aligned.
        (!self.ptr.is_null()).then(|| unsafe { self.ptr.read_unaligned() })
    }
}

/// An array the application gave for the implementation to fill, one element per entry
/// of its count (`binary_status`), or NULL.
pub struct OutArray<T> {
    ptr: *mut T,
    count: usize,
}

impl<T: Copy> OutArray<T> {
    /// # Safety
    /// `ptr` is NULL or writable for `count` `T`s (the implementation accepted the count,
    /// so the OpenCL API requires the array to hold it), for as long as the `OutArray`
    /// lives (the intercepted call).
    pub unsafe fn new(ptr: *mut T, count: usize) -> OutArray<T> {
        OutArray { ptr, count }
    }

    /// Writes element `i`, unless the array is NULL or `i` is beyond its count.
    pub fn set(&self, i: usize, value: T) {
        if !self.ptr.is_null() && i < self.count {
            // SAFETY: i < count elements, writable (`new`'s contract); unaligned, as the
            // application's memory need not be aligned.
            unsafe { self.ptr.add(i).write_unaligned(value) };
        }
    }
}

/// The application's bytes, with the length it gave: read as a slice that lives as long
/// as the call (`'a`), never beyond that length, and only up to what a slice can hold.
#[derive(Clone, Copy)]
pub struct AppBytes<'a> {
    ptr: *const u8,
    len: usize,
    call: PhantomData<&'a [u8]>,
}

impl<'a> AppBytes<'a> {
    /// # Safety
    /// `ptr` is NULL or readable for `len` bytes (what the OpenCL API requires of the
    /// application for the argument, and what the implementation may read) until the
    /// intercepted call returns, which `'a` does not outlast. Nothing is read here.
    pub unsafe fn new(ptr: *const u8, len: usize) -> AppBytes<'a> {
        AppBytes {
            ptr,
            len,
            call: PhantomData,
        }
    }

    /// The length the application gave.
    pub fn len(&self) -> usize {
        self.len
    }

    /// The first `n` bytes; None when NULL, shorter than `n`, or longer than a slice can be.
    pub fn prefix(&self, n: usize) -> Option<&'a [u8]> {
        if self.ptr.is_null() || n > self.len || n > isize::MAX as usize {
            return None;
        }
        // SAFETY: n <= len bytes, readable until the call returns (`new`'s contract), which
        // 'a does not outlast; at most isize::MAX bytes. u8 has no alignment to keep.
        Some(unsafe { std::slice::from_raw_parts(self.ptr, n) })
    }

    /// All `len` bytes (None as for [`AppBytes::prefix`]).
    pub fn whole(&self) -> Option<&'a [u8]> {
        self.prefix(self.len)
    }
}

/// The application's NUL-terminated string (or NULL), read as a slice that lives as long
/// as the call.
#[derive(Clone, Copy)]
pub struct AppCStr<'a> {
    ptr: *const c_char,
    call: PhantomData<&'a [u8]>,
}

impl<'a> AppCStr<'a> {
    /// # Safety
    /// `ptr` is NULL or a NUL-terminated string (what the OpenCL API requires of the
    /// argument) that stays unchanged until the intercepted call returns, which `'a` does
    /// not outlast. Nothing is read here.
    pub unsafe fn new(ptr: *const c_char) -> AppCStr<'a> {
        AppCStr {
            ptr,
            call: PhantomData,
        }
    }

    /// The string's bytes without its NUL; None for NULL.
    pub fn bytes(&self) -> Option<&'a [u8]> {
        // SAFETY: non-NULL, so NUL-terminated and unchanged until the call returns (`new`'s
        // contract), which 'a does not outlast.
        (!self.ptr.is_null()).then(|| unsafe { CStr::from_ptr(self.ptr) }.to_bytes())
    }
}

/// An array the application gave with its count. Not read until the caller says it may be.
#[derive(Clone, Copy)]
pub struct AppArray<T> {
    ptr: *const T,
    count: usize,
}

impl<T: Copy> AppArray<T> {
    /// # Safety
    /// `ptr` and `count` are the application's arguments of the intercepted call, which the
    /// `AppArray` does not outlive. Nothing is read here.
    pub unsafe fn new(ptr: *const T, count: usize) -> AppArray<T> {
        AppArray { ptr, count }
    }

    /// An array of no elements.
    pub fn empty() -> AppArray<T> {
        AppArray {
            ptr: std::ptr::null(),
            count: 0,
        }
    }

    pub fn is_null(&self) -> bool {
        self.ptr.is_null()
    }

    /// The count the application gave (which the array may not have, until accepted).
    pub fn len(&self) -> usize {
        self.count
    }

    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// The pointer, to hand on unchanged to the implementation.
    pub fn as_ptr(&self) -> *const T {
        self.ptr
    }

    /// Element `i`, read in place (the launch path's sizes, read on every launch: no
    /// allocation, no copy of the rest).
    ///
    /// # Safety
    /// The array is non-NULL and holds more than `i` elements (`i < len()`, as the OpenCL
    /// API requires of the application's arguments), and the call has not returned to
    /// the application yet.
    #[inline(always)]
    pub unsafe fn at(&self, i: usize) -> T {
        debug_assert!(!self.ptr.is_null() && i < self.count);
        // SAFETY: i < count elements, which the array holds (the caller's contract);
        // unaligned, as the application's memory need not be aligned.
        unsafe { self.ptr.add(i).read_unaligned() }
    }

    /// A copy of the elements (empty for a NULL array).
    ///
    /// # Safety
    /// The implementation accepted the call (so the array holds `len()` elements) and the
    /// call has not returned to the application yet.
    pub unsafe fn read(&self) -> Vec<T> {
        if self.ptr.is_null() {
            return Vec::new();
        }
        (0..self.count)
            // SAFETY: i < count, and the array holds count elements (the caller's
            // contract); unaligned, as the application's memory need not be aligned.
            .map(|i| unsafe { self.ptr.add(i).read_unaligned() })
            .collect()
    }
}

/// A `param_value` buffer and its size (`param_value_size`).
pub struct AppBuffer {
    ptr: *mut c_void,
    size: usize,
}

impl AppBuffer {
    /// # Safety
    /// `ptr` is NULL or writable (and readable once written) for `size` bytes, as the OpenCL
    /// API requires of applications, for as long as the `AppBuffer` lives.
    pub unsafe fn new(ptr: *mut c_void, size: usize) -> AppBuffer {
        AppBuffer { ptr, size }
    }

    /// The pointer, to hand on unchanged to the implementation.
    pub fn as_ptr(&self) -> *mut c_void {
        self.ptr
    }

    /// The `i`th `T` of the buffer, or None when it lies beyond its size.
    pub fn get<T: Copy>(&self, i: usize) -> Option<T> {
        let w = std::mem::size_of::<T>();
        let end = i.checked_add(1)?.checked_mul(w)?;
        if self.ptr.is_null() || end > self.size {
            return None;
        }
        // SAFETY: within the buffer's `size` bytes (checked above), which `new`'s contract
        // makes readable once written: clshim reads only what the implementation or clshim
        // wrote. Unaligned, as the application's buffer need not be aligned.
        Some(unsafe { (self.ptr as *const T).add(i).read_unaligned() })
    }

    /// The first `n` `T`s, or None when they do not fit the buffer.
    pub fn first<T: Copy>(&self, n: usize) -> Option<Vec<T>> {
        if n > 0 {
            self.get::<T>(n - 1)?;
        }
        (0..n).map(|i| self.get(i)).collect()
    }

    /// Writes `bytes` at its start; false (nothing written) when they do not fit.
    pub fn write(&self, bytes: &[u8]) -> bool {
        if self.ptr.is_null() || bytes.len() > self.size {
            return false;
        }
        // SAFETY: `bytes.len()` fits the buffer's writable `size` bytes (checked above), and
        // clshim's own bytes never overlap the application's buffer.
        unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), self.ptr as *mut u8, bytes.len()) };
        true
    }

    /// Replaces the `i`th `T` (false, nothing written, when beyond its size).
    pub fn set<T: Copy>(&self, i: usize, value: T) -> bool {
        let w = std::mem::size_of::<T>();
        let Some(end) = i.checked_add(1).and_then(|e| e.checked_mul(w)) else {
            return false;
        };
        if self.ptr.is_null() || end > self.size {
            return false;
        }
        // SAFETY: within the buffer's writable `size` bytes (checked above); unaligned.
        unsafe { (self.ptr as *mut T).add(i).write_unaligned(value) };
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn out_param_writes_unless_omitted() {
        let mut v = 0i32;
        // SAFETY: a live local.
        let o = unsafe { OutParam::new(&mut v as *mut i32) };
        o.set(crate::cl::CL_INVALID_VALUE);
        assert_eq!(v, crate::cl::CL_INVALID_VALUE);
        // SAFETY: NULL is allowed.
        let none = unsafe { OutParam::<i32>::new(std::ptr::null_mut()) };
        none.set(1); // no write, no crash
    }

    #[test]
    fn buffer_checks_size_and_alignment() {
        let mut raw = [0u8; 17];
        // An unaligned view: one byte in.
        // SAFETY: 16 writable bytes from raw[1].
        let b = unsafe { AppBuffer::new(raw.as_mut_ptr().add(1) as *mut c_void, 16) };
        assert!(b.set::<usize>(1, 7));
        assert!(!b.set::<usize>(2, 7));
        assert_eq!(b.get::<usize>(1), Some(7));
        assert_eq!(b.get::<usize>(2), None);
        assert_eq!(b.first::<usize>(2), Some(vec![0, 7]));
        assert_eq!(b.first::<usize>(3), None);
        assert!(!b.write(&[1u8; 17]));
        assert!(b.write(&[1u8; 16]));
        assert_eq!(raw[0], 0);
        assert_eq!(raw[16], 1);
    }

    #[test]
    fn bytes_read_no_further_than_their_length() {
        let raw = *b"abcdef";
        // SAFETY: 6 live bytes, claimed as 4.
        let b = unsafe { AppBytes::new(raw.as_ptr(), 4) };
        assert_eq!(b.prefix(2), Some(&b"ab"[..]));
        assert_eq!(b.whole(), Some(&b"abcd"[..]));
        assert_eq!(b.prefix(5), None);
        // SAFETY: NULL is never read.
        let none = unsafe { AppBytes::new(std::ptr::null(), 8) };
        assert_eq!(none.prefix(0), None);
        // SAFETY: a claim beyond any slice is never read.
        let huge = unsafe { AppBytes::new(raw.as_ptr(), usize::MAX) };
        assert_eq!(huge.whole(), None);
        assert_eq!(huge.prefix(3), Some(&b"abc"[..]));
        // SAFETY: a NUL-terminated literal, and NULL.
        let (s, n) = unsafe {
            (
                AppCStr::new(b"opt\0".as_ptr() as *const c_char),
                AppCStr::new(std::ptr::null()),
            )
        };
        assert_eq!(s.bytes(), Some(&b"opt"[..]));
        assert_eq!(n.bytes(), None);
    }

    #[test]
    fn out_arrays_write_within_their_count() {
        let mut raw = [0i32; 3];
        // SAFETY: 3 writable, claimed as 2.
        let a = unsafe { OutArray::new(raw.as_mut_ptr(), 2) };
        a.set(0, 5);
        a.set(2, 9); // beyond the count: not written
        assert_eq!(raw, [5, 0, 0]);
        // SAFETY: NULL is never written.
        unsafe { OutArray::<i32>::new(std::ptr::null_mut(), 4) }.set(0, 1);
    }

    #[test]
    fn array_reads_its_count_or_nothing() {
        let v = [1u64, 2, 3];
        // SAFETY: a live local array of 3.
        let a = unsafe { AppArray::new(v.as_ptr(), 2) };
        // SAFETY: holds 2 (of 3).
        assert_eq!(unsafe { a.read() }, vec![1, 2]);
        // SAFETY: NULL reads as empty.
        let n = unsafe { AppArray::<u64>::new(std::ptr::null(), 5) };
        // SAFETY: NULL reads as empty.
        let none = unsafe { n.read() };
        assert!(none.is_empty());
        assert!(AppArray::<u64>::empty().is_empty());
    }

    #[test]
    fn arrays_are_read_at_any_alignment() {
        // Three usizes one byte into a byte buffer: misaligned for usize.
        let mut raw = [0u8; 1 + 3 * std::mem::size_of::<usize>()];
        for (i, v) in [64usize, 2, 3].iter().enumerate() {
            let at = 1 + i * std::mem::size_of::<usize>();
            raw[at..at + std::mem::size_of::<usize>()].copy_from_slice(&v.to_ne_bytes());
        }
        // SAFETY: 3 usizes from raw[1], read unaligned.
        let a = unsafe { AppArray::new(raw.as_ptr().add(1) as *const usize, 3) };
        // SAFETY: holds 3.
        assert_eq!(unsafe { [a.at(0), a.at(2)] }, [64, 3]);
        // SAFETY: holds 3.
        assert_eq!(unsafe { a.read() }, vec![64, 2, 3]);
    }
}
