//! The allocator for a process that decodes Kafka frames from the network.
//!
//! The `kafka-protocol` decoders size a `Vec` from an array's element count before they
//! read a single element, and that count comes off the wire: a 14-byte Metadata v0
//! request that claims 2^31 topics asks for 154 GB at once. The system allocator
//! refuses, and a refused allocation aborts the process, so one small frame from any
//! client could stop the broker.
//!
//! [`Allocator`] hands requests of 1 GiB or more address space mapped without reserving
//! memory for it (`MAP_NORESERVE`, which the kernel's default overcommit heuristic does
//! not count): the request succeeds, the decoder fails at the first element that is not
//! there, and the untouched mapping is returned. Pages are backed only when written, so
//! a genuine allocation that large still works. Everything smaller goes to the system
//! allocator. Under `vm.overcommit_memory = 2` (strict accounting) the kernel refuses
//! such mappings too, and a frame like the one above still aborts the process.
#![allow(unsafe_code)]

use std::alloc::{GlobalAlloc, Layout, System};
use std::ffi::c_void;

use rustix::mm::{MapFlags, ProtFlags, mmap_anonymous, munmap};

/// Allocations this large or larger are mapped lazily.
const LAZY_FROM: usize = 1 << 30;
/// mmap's alignment.
const PAGE: usize = 4096;

/// The system allocator, with lazily mapped huge allocations (see the module docs).
pub struct Allocator;

fn lazy(size: usize, align: usize) -> bool {
    size >= LAZY_FROM && align <= PAGE
}

// SAFETY: every block comes from exactly one of two sources and goes back to the same
// one: `lazy` decides by the layout, which the caller passes unchanged to `dealloc`;
// mmap'd blocks are page-aligned (≥ the layouts sent there) and zero-filled.
unsafe impl GlobalAlloc for Allocator {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if !lazy(layout.size(), layout.align()) {
            // SAFETY: forwarded with the caller's layout.
            return unsafe { System.alloc(layout) };
        }
        let flags = MapFlags::PRIVATE | MapFlags::NORESERVE;
        let prot = ProtFlags::READ | ProtFlags::WRITE;
        // SAFETY: a fresh anonymous mapping at an address the kernel picks.
        match unsafe { mmap_anonymous(std::ptr::null_mut(), layout.size(), prot, flags) } {
            Ok(p) => p.cast(),
            Err(_) => std::ptr::null_mut(),
        }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        if lazy(layout.size(), layout.align()) {
            // SAFETY: anonymous mappings are zero-filled.
            unsafe { self.alloc(layout) }
        } else {
            // SAFETY: forwarded with the caller's layout.
            unsafe { System.alloc_zeroed(layout) }
        }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        if lazy(layout.size(), layout.align()) {
            // SAFETY: `ptr` is the start of a mapping of this size made by `alloc`.
            let _ = unsafe { munmap(ptr.cast::<c_void>(), layout.size()) };
        } else {
            // SAFETY: `ptr` came from `System` with this layout.
            unsafe { System.dealloc(ptr, layout) }
        }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        if !lazy(layout.size(), layout.align()) && !lazy(new_size, layout.align()) {
            // SAFETY: both sizes stay with `System`.
            return unsafe { System.realloc(ptr, layout, new_size) };
        }
        // SAFETY: the caller guarantees `new_size` is valid for this alignment.
        let new_layout = unsafe { Layout::from_size_align_unchecked(new_size, layout.align()) };
        // SAFETY: as in `alloc`, `copy_nonoverlapping` and `dealloc`: two distinct blocks,
        // each at least the copied length, the old one freed with its own layout.
        unsafe {
            let new = self.alloc(new_layout);
            if !new.is_null() {
                std::ptr::copy_nonoverlapping(ptr, new, layout.size().min(new_size));
                self.dealloc(ptr, layout);
            }
            new
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_huge_untouched_allocation_costs_nothing_and_a_written_one_works() {
        // 256 GiB: far beyond this machine's memory, and only address space.
        let mut v: Vec<u64> = Vec::with_capacity(32 << 30);
        assert!(v.capacity() >= 32 << 30);
        v.extend(0..1_000);
        assert_eq!(v.iter().sum::<u64>(), 499_500);
        // Growing from a small block into the lazy range and back keeps the contents.
        let mut w = vec![7u8; 1024];
        w.reserve(2 << 30);
        assert_eq!(&w[..], &[7u8; 1024][..]);
        w.shrink_to_fit();
        assert_eq!(w.len(), 1024);
    }
}
