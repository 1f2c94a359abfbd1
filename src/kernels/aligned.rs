//! Buffers whose first value starts a 64-byte cache line.
//!
//! An AMX tile load reads 16 rows of 64 bytes. Where a row straddles two cache lines (any base
//! address that is not a multiple of 64, which is what the system allocator hands out for
//! large blocks: a page plus its 16-byte header), every row costs two line reads and the load
//! runs several times slower than the tile product it feeds. Packed weights and packed input
//! rows therefore live in a [`LineVec`].

use std::marker::PhantomData;
use std::ops::{Deref, DerefMut};

/// Plain numbers: every bit pattern is a value and all-zero bits are zero.
///
/// # Safety
/// Implement only for types without padding, invalid bit patterns or drop glue, and whose
/// alignment divides 64.
pub unsafe trait Plain: Copy + Send + Sync + 'static {}

// SAFETY: plain numbers of 1, 2 or 4 bytes; any bits are a value, zero bits are zero.
unsafe impl Plain for u8 {}
// SAFETY: as above.
unsafe impl Plain for u32 {}
// SAFETY: as above.
unsafe impl Plain for f32 {}
// SAFETY: as above.
unsafe impl Plain for half::bf16 {}

/// One cache line of storage.
#[repr(C, align(64))]
#[derive(Clone, Copy)]
struct Line([u8; 64]);

const ZERO_LINE: Line = Line([0; 64]);

/// A growable buffer of [`Plain`] values, zero-initialised, whose first value is 64-byte
/// aligned. Dereferences to a slice.
pub struct LineVec<T: Plain> {
    lines: Vec<Line>,
    len: usize,
    values: PhantomData<T>,
}

impl<T: Plain> LineVec<T> {
    /// An empty buffer (allocates nothing).
    pub const fn new() -> Self {
        Self {
            lines: Vec::new(),
            len: 0,
            values: PhantomData,
        }
    }

    /// `len` zeros.
    pub fn zeroed(len: usize) -> Self {
        let mut buffer = Self::new();
        buffer.resize_zeroed(len);
        buffer
    }

    /// A copy of `values`.
    pub fn from_slice(values: &[T]) -> Self {
        let mut buffer = Self::zeroed(values.len());
        buffer.copy_from_slice(values);
        buffer
    }

    /// Sets the length to `len`: values below both lengths are kept and new ones are zero, as
    /// `Vec::resize(len, 0)` does. Memory is reused when it suffices.
    pub fn resize_zeroed(&mut self, len: usize) {
        let (old, old_lines) = (self.len, self.lines.len());
        self.resize_for_overwrite(len);
        // Lines added just now are zero; values in the old lines past the old length may hold
        // what a longer use left.
        let reused = (old_lines * 64 / std::mem::size_of::<T>()).min(len);
        if reused > old {
            // SAFETY: `old..reused` lies within the new length; zero bits are zero for every
            // `Plain` type.
            unsafe { std::ptr::write_bytes(self.as_mut_ptr().add(old), 0, reused - old) };
        }
    }

    /// Sets the length to `len` without zeroing: values past the old length hold zeros or what
    /// an earlier, longer use left. For callers that overwrite every value.
    pub fn resize_for_overwrite(&mut self, len: usize) {
        let bytes = len
            .checked_mul(std::mem::size_of::<T>())
            .expect("buffer length overflows");
        let lines = bytes.div_ceil(64);
        if lines > self.lines.len() {
            self.lines.resize(lines, ZERO_LINE);
        }
        self.len = len;
    }
}

impl<T: Plain> Default for LineVec<T> {
    fn default() -> Self {
        Self::new()
    }
}

impl<T: Plain> Clone for LineVec<T> {
    fn clone(&self) -> Self {
        Self {
            lines: self.lines.clone(),
            len: self.len,
            values: PhantomData,
        }
    }
}

impl<T: Plain> Deref for LineVec<T> {
    type Target = [T];

    fn deref(&self) -> &[T] {
        // SAFETY: `lines` holds at least `len * size_of::<T>()` initialised bytes, aligned to 64
        // (which `T`'s alignment divides), and any bits are a `T`.
        unsafe { std::slice::from_raw_parts(self.lines.as_ptr().cast::<T>(), self.len) }
    }
}

impl<T: Plain> DerefMut for LineVec<T> {
    fn deref_mut(&mut self) -> &mut [T] {
        // SAFETY: as in `deref`, borrowed uniquely.
        unsafe { std::slice::from_raw_parts_mut(self.lines.as_mut_ptr().cast::<T>(), self.len) }
    }
}

impl<T: Plain + std::fmt::Debug> std::fmt::Debug for LineVec<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.iter()).finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_start_a_cache_line_and_resizing_keeps_then_zeroes() {
        let mut buffer = LineVec::<u32>::zeroed(5);
        assert_eq!(buffer.as_ptr() as usize % 64, 0);
        assert_eq!(&buffer[..], &[0; 5]);
        buffer.copy_from_slice(&[1, 2, 3, 4, 5]);
        buffer.resize_zeroed(2);
        assert_eq!(&buffer[..], &[1, 2]);
        buffer.resize_zeroed(40);
        assert_eq!(buffer.as_ptr() as usize % 64, 0);
        assert_eq!(&buffer[..3], &[1, 2, 0]);
        assert!(buffer[2..].iter().all(|&v| v == 0));
        buffer.resize_for_overwrite(1);
        buffer[0] = 7;
        buffer.resize_for_overwrite(3);
        assert_eq!(&buffer[..], &[7, 2, 0]);
        let empty = LineVec::<half::bf16>::new();
        assert!(empty.is_empty());
    }
}
