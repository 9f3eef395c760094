//! Buffers handed to and returned by I/O: [`IoBuf`] (immutable, cheap to clone), [`IoBufs`]
//! (one or more of them, as a send or a write takes and a receive or a read returns), and
//! their mutable counterparts [`IoBufMut`] and [`IoBufsMut`].
//!
//! Invariants:
//! - The bytes of a buffer live on the heap and never move while the buffer is alive, so an
//!   in-flight operation that owns the buffer may hand its address to the kernel.
//! - `IoBufs` never holds an empty chunk unless it is the only one (the empty value), so
//!   `len() == 0` exactly when it is empty and iterating it never yields zero-length slices to
//!   the kernel.

pub mod paged;

use bytes::{Bytes, BytesMut};
use std::ops::{Deref, DerefMut};

/// Immutable contiguous bytes. Cloning shares them (one count), never copies.
#[derive(Clone, Default, PartialEq, Eq, Hash)]
pub struct IoBuf(Bytes);

impl IoBuf {
    /// An empty buffer.
    pub const fn new() -> Self {
        Self(Bytes::new())
    }

    /// Copies `data` into a new buffer.
    pub fn copy_from_slice(data: &[u8]) -> Self {
        Self(Bytes::copy_from_slice(data))
    }

    /// The bytes as [`bytes::Bytes`], without copying.
    pub fn into_bytes(self) -> Bytes {
        self.0
    }

    /// The sub-range `range` of this buffer, sharing its bytes.
    pub fn slice(&self, range: impl std::ops::RangeBounds<usize>) -> Self {
        Self(self.0.slice(range))
    }
}

impl std::fmt::Debug for IoBuf {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "IoBuf({} bytes)", self.0.len())
    }
}

impl Deref for IoBuf {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        &self.0
    }
}

impl AsRef<[u8]> for IoBuf {
    fn as_ref(&self) -> &[u8] {
        &self.0
    }
}

impl From<Vec<u8>> for IoBuf {
    fn from(data: Vec<u8>) -> Self {
        Self(Bytes::from(data))
    }
}

impl From<&'static [u8]> for IoBuf {
    fn from(data: &'static [u8]) -> Self {
        Self(Bytes::from_static(data))
    }
}

impl<const N: usize> From<&'static [u8; N]> for IoBuf {
    fn from(data: &'static [u8; N]) -> Self {
        Self(Bytes::from_static(data))
    }
}

impl From<&'static str> for IoBuf {
    fn from(data: &'static str) -> Self {
        Self(Bytes::from_static(data.as_bytes()))
    }
}

impl From<Bytes> for IoBuf {
    fn from(data: Bytes) -> Self {
        Self(data)
    }
}

impl From<IoBufMut> for IoBuf {
    fn from(data: IoBufMut) -> Self {
        Self(data.0.freeze())
    }
}

/// One or more [`IoBuf`]s, read or written as one run of bytes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IoBufs(Chunks);

#[derive(Clone, Debug, PartialEq, Eq)]
enum Chunks {
    One(IoBuf),
    /// At least two non-empty chunks.
    Many(Vec<IoBuf>),
}

impl Default for IoBufs {
    fn default() -> Self {
        Self(Chunks::One(IoBuf::new()))
    }
}

impl IoBufs {
    /// An iovec for each of the first `N` chunks, and how many were filled: for one vectored
    /// system call that only reads them, while `self` lives.
    pub(crate) fn iovecs<const N: usize>(&self) -> ([libc::iovec; N], usize) {
        let mut iovecs = [libc::iovec {
            iov_base: std::ptr::null_mut(),
            iov_len: 0,
        }; N];
        let mut count = 0;
        for (iovec, chunk) in iovecs.iter_mut().zip(self.chunks()) {
            iovec.iov_base = chunk.as_ptr().cast_mut().cast();
            iovec.iov_len = chunk.len();
            count += 1;
        }
        (iovecs, count)
    }

    /// Total number of bytes.
    pub fn len(&self) -> usize {
        match &self.0 {
            Chunks::One(buf) => buf.len(),
            Chunks::Many(bufs) => bufs.iter().map(|buf| buf.len()).sum(),
        }
    }

    /// Whether there are no bytes.
    pub fn is_empty(&self) -> bool {
        match &self.0 {
            Chunks::One(buf) => buf.is_empty(),
            Chunks::Many(_) => false,
        }
    }

    /// The bytes as one buffer: free for a single chunk, one copy otherwise.
    pub fn coalesce(self) -> IoBuf {
        match self.0 {
            Chunks::One(buf) => buf,
            Chunks::Many(bufs) => {
                let mut joined = Vec::with_capacity(bufs.iter().map(|buf| buf.len()).sum());
                for buf in &bufs {
                    joined.extend_from_slice(buf);
                }
                IoBuf::from(joined)
            }
        }
    }

    /// The chunks, in order (never an empty chunk, unless the whole value is empty).
    pub fn chunks(&self) -> &[IoBuf] {
        match &self.0 {
            Chunks::One(buf) => std::slice::from_ref(buf),
            Chunks::Many(bufs) => bufs,
        }
    }

    /// Appends `buf` after the bytes already held.
    pub fn push(&mut self, buf: IoBuf) {
        if buf.is_empty() {
            return;
        }
        match &mut self.0 {
            Chunks::One(first) if first.is_empty() => *first = buf,
            Chunks::One(first) => {
                let first = std::mem::take(first);
                self.0 = Chunks::Many(vec![first, buf]);
            }
            Chunks::Many(bufs) => bufs.push(buf),
        }
    }

    /// Drops the first `count` bytes (at most [`len`](Self::len)).
    pub(crate) fn advance(&mut self, mut count: usize) {
        let chunks = match &mut self.0 {
            Chunks::One(buf) => {
                let count = count.min(buf.len());
                *buf = buf.slice(count..);
                return;
            }
            Chunks::Many(bufs) => bufs,
        };
        let mut whole = 0;
        while whole < chunks.len() && chunks[whole].len() <= count {
            count -= chunks[whole].len();
            whole += 1;
        }
        chunks.drain(..whole);
        if let Some(first) = chunks.first_mut() {
            *first = first.slice(count..);
        }
        match chunks.len() {
            0 => self.0 = Chunks::One(IoBuf::new()),
            1 => self.0 = Chunks::One(chunks.pop().expect("one chunk")),
            _ => {}
        }
    }
}

impl From<IoBuf> for IoBufs {
    fn from(buf: IoBuf) -> Self {
        Self(Chunks::One(buf))
    }
}

impl From<Vec<u8>> for IoBufs {
    fn from(data: Vec<u8>) -> Self {
        IoBuf::from(data).into()
    }
}

impl From<&'static [u8]> for IoBufs {
    fn from(data: &'static [u8]) -> Self {
        IoBuf::from(data).into()
    }
}

impl<const N: usize> From<&'static [u8; N]> for IoBufs {
    fn from(data: &'static [u8; N]) -> Self {
        IoBuf::from(data).into()
    }
}

impl From<&'static str> for IoBufs {
    fn from(data: &'static str) -> Self {
        IoBuf::from(data).into()
    }
}

impl From<Bytes> for IoBufs {
    fn from(data: Bytes) -> Self {
        IoBuf::from(data).into()
    }
}

impl From<IoBufMut> for IoBufs {
    fn from(data: IoBufMut) -> Self {
        IoBuf::from(data).into()
    }
}

impl From<Vec<IoBuf>> for IoBufs {
    fn from(bufs: Vec<IoBuf>) -> Self {
        let mut joined = IoBufs::default();
        for buf in bufs {
            joined.push(buf);
        }
        joined
    }
}

/// Mutable contiguous bytes, as a read fills them.
#[derive(Default, PartialEq, Eq)]
pub struct IoBufMut(BytesMut);

impl IoBufMut {
    /// An empty buffer with room for `capacity` bytes.
    pub fn with_capacity(capacity: usize) -> Self {
        Self(BytesMut::with_capacity(capacity))
    }

    /// `len` zero bytes.
    pub fn zeroed(len: usize) -> Self {
        Self(BytesMut::zeroed(len))
    }

    /// Room left before the buffer must grow.
    pub fn capacity(&self) -> usize {
        self.0.capacity()
    }

    /// Freezes the bytes into an [`IoBuf`] without copying.
    pub fn freeze(self) -> IoBuf {
        IoBuf(self.0.freeze())
    }

    /// The bytes as [`bytes::BytesMut`], without copying.
    pub fn into_bytes_mut(self) -> BytesMut {
        self.0
    }

    /// The spare capacity's address, for the kernel to fill.
    pub(crate) fn spare_ptr(&mut self) -> *mut u8 {
        self.0.spare_capacity_mut().as_mut_ptr().cast()
    }

    /// Marks `count` more bytes of the spare capacity as filled.
    ///
    /// # Safety
    ///
    /// The first `count` bytes of the spare capacity must have been written.
    pub(crate) unsafe fn filled(&mut self, count: usize) {
        debug_assert!(count <= self.0.capacity() - self.0.len());
        // SAFETY: the caller guarantees those bytes are initialized.
        unsafe { self.0.set_len(self.0.len() + count) };
    }

    /// Splits off the first `at` bytes, keeping the rest (and any spare capacity).
    pub(crate) fn split_to(&mut self, at: usize) -> IoBufMut {
        IoBufMut(self.0.split_to(at))
    }

    /// Makes room for `additional` more bytes.
    pub(crate) fn reserve(&mut self, additional: usize) {
        self.0.reserve(additional);
    }

    /// Appends a copy of `bytes`, growing the buffer if it must.
    pub(crate) fn extend_from_slice(&mut self, bytes: &[u8]) {
        self.0.extend_from_slice(bytes);
    }

    /// Empties the buffer, keeping its room.
    pub(crate) fn clear(&mut self) {
        self.0.clear();
    }
}

impl std::fmt::Debug for IoBufMut {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "IoBufMut({} bytes)", self.0.len())
    }
}

impl Deref for IoBufMut {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        &self.0
    }
}

impl DerefMut for IoBufMut {
    fn deref_mut(&mut self) -> &mut [u8] {
        &mut self.0
    }
}

impl AsRef<[u8]> for IoBufMut {
    fn as_ref(&self) -> &[u8] {
        &self.0
    }
}

impl From<Vec<u8>> for IoBufMut {
    fn from(data: Vec<u8>) -> Self {
        Self(BytesMut::from(&data[..]))
    }
}

/// One or more [`IoBufMut`]s, as a batch of reads returns them.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct IoBufsMut(Vec<IoBufMut>);

impl IoBufsMut {
    /// Total number of bytes.
    pub fn len(&self) -> usize {
        self.0.iter().map(|buf| buf.len()).sum()
    }

    /// Whether there are no bytes.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The bytes as one buffer: free for a single chunk, one copy otherwise.
    pub fn coalesce(mut self) -> IoBufMut {
        match self.0.len() {
            0 => IoBufMut::default(),
            1 => self.0.pop().expect("one chunk"),
            _ => {
                let mut joined = BytesMut::with_capacity(self.len());
                for buf in &self.0 {
                    joined.extend_from_slice(buf);
                }
                IoBufMut(joined)
            }
        }
    }

    /// The chunks, in order.
    pub fn chunks(&self) -> &[IoBufMut] {
        &self.0
    }

    /// Freezes every chunk into [`IoBufs`] without copying.
    pub fn freeze(self) -> IoBufs {
        self.0
            .into_iter()
            .map(IoBufMut::freeze)
            .collect::<Vec<_>>()
            .into()
    }
}

impl From<IoBufMut> for IoBufsMut {
    fn from(buf: IoBufMut) -> Self {
        Self(vec![buf])
    }
}

impl From<Vec<IoBufMut>> for IoBufsMut {
    fn from(bufs: Vec<IoBufMut>) -> Self {
        Self(bufs)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bufs_keep_order_skip_empty_chunks_and_advance_across_them() {
        let mut bufs = IoBufs::from(b"ab");
        bufs.push(IoBuf::new());
        bufs.push(IoBuf::from(b"cde"));
        bufs.push(IoBuf::from(vec![b'f']));
        assert_eq!(bufs.len(), 6);
        assert_eq!(bufs.chunks().len(), 3, "the empty chunk was skipped");
        let mut advanced = bufs.clone();
        advanced.advance(3);
        assert_eq!(advanced.chunks().len(), 2);
        assert_eq!(advanced.clone().coalesce().as_ref(), b"def");
        advanced.advance(3);
        assert!(advanced.is_empty());
        assert_eq!(bufs.coalesce().as_ref(), b"abcdef");
    }

    #[test]
    fn mutable_bufs_freeze_and_coalesce_without_losing_bytes() {
        let mut buf = IoBufMut::with_capacity(8);
        buf.reserve(4);
        let first = IoBufMut::from(b"head".to_vec());
        let joined = IoBufsMut::from(vec![first, IoBufMut::zeroed(2)]);
        assert_eq!(joined.len(), 6);
        assert_eq!(joined.freeze().coalesce().as_ref(), b"head\0\0");
        assert!(buf.is_empty() && buf.capacity() >= 8);
    }
}
