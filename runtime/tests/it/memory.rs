//! The crate's own memory: 64-byte aligned buffers, the reinterpreting
//! casts, and the arena carved into typed regions. These hold most of the
//! library's `unsafe` outside the kernels, so they are also the first thing
//! the Miri run checks (README "Sanitizers").

use legacy_ml::core::aligned::{bytes_as_f32, bytes_as_i8, AlignedBytes, ALIGN};
use legacy_ml::core::arena::{total_bytes, Arena};
use legacy_ml::ErrorKind;

#[test]
fn aligned_bytes_are_zeroed_aligned_and_writable() {
    for len in [0, 1, 3, 63, 64, 65, 1000] {
        let mut b = AlignedBytes::zeroed(len, "test buffer").unwrap();
        assert_eq!(b.len(), len);
        assert_eq!(b.is_empty(), len == 0);
        assert_eq!(b.as_bytes().as_ptr() as usize % ALIGN, 0, "len {len}");
        assert!(b.as_bytes().iter().all(|&x| x == 0), "len {len}");
        for (i, x) in b.as_bytes_mut().iter_mut().enumerate() {
            *x = i as u8 ^ 0x5A;
        }
        assert!(b.as_bytes().iter().enumerate().all(|(i, &x)| x == i as u8 ^ 0x5A));
    }
}

#[test]
fn an_impossible_size_is_a_no_mem_error_not_an_abort() {
    for len in [usize::MAX, isize::MAX as usize] {
        let e = AlignedBytes::zeroed(len, "huge buffer").err().expect("refused");
        assert_eq!(e.kind, ErrorKind::NoMem);
        assert_eq!(e.message, format!("cannot allocate {len} bytes for the huge buffer"));
    }
}

#[test]
fn byte_views_check_alignment_and_length() {
    let mut b = AlignedBytes::zeroed(68, "view buffer").unwrap();
    for (i, chunk) in b.as_bytes_mut().chunks_exact_mut(4).enumerate() {
        chunk.copy_from_slice(&(i as f32 - 2.5).to_le_bytes());
    }
    let bytes = b.as_bytes();
    let f = bytes_as_f32(bytes).unwrap();
    assert_eq!(f.len(), 17);
    assert_eq!((f[0], f[16]), (-2.5, 13.5));
    assert_eq!(bytes_as_f32(&bytes[4..12]).unwrap(), [-1.5, -0.5]);
    assert_eq!(bytes_as_f32(&bytes[..0]).unwrap(), [] as [f32; 0]);
    for (what, slice) in [("misaligned", &bytes[1..9]), ("ragged", &bytes[..6])] {
        let e = bytes_as_f32(slice).expect_err(what);
        assert_eq!(e.kind, ErrorKind::Format, "{what}");
        assert!(e.message.contains("misaligned or ragged"), "{what}: {}", e.message);
    }
    let raw = [0u8, 1, 0x7F, 0x80, 0xFF];
    assert_eq!(bytes_as_i8(&raw), [0, 1, 127, -128, -1]);
}

#[test]
fn the_arena_carves_disjoint_aligned_regions() {
    // Sizes in bytes: odd ones, an empty one, and one of exactly 64.
    let sizes = [12usize, 65, 0, 64, 7, 40];
    assert_eq!(total_bytes(&sizes), Some(64 + 128 + 64 + 64 + 64));
    let mut arena = Arena::new(&sizes, "test arena").unwrap();
    assert_eq!(arena.len(), 384);
    assert!(!arena.is_empty());
    let mut c = arena.carver();
    let a = c.f32s(sizes[0]);
    let b = c.i8s(sizes[1]);
    let e = c.f32s(sizes[2]);
    let d = c.f32s(sizes[3]);
    let g = c.i8s(sizes[4]);
    let h = c.f32s(sizes[5]);
    assert_eq!(
        (a.len(), b.len(), e.len(), d.len(), g.len(), h.len()),
        (3, 65, 0, 16, 7, 10)
    );
    for p in [
        a.as_ptr() as usize,
        b.as_ptr() as usize,
        d.as_ptr() as usize,
        g.as_ptr() as usize,
    ] {
        assert_eq!(p % ALIGN, 0);
    }
    // Zeroed, and writing every region fully leaves the others intact.
    assert!(a.iter().chain(&*d).chain(&*h).all(|&v| v == 0.0));
    assert!(b.iter().chain(&*g).all(|&v| v == 0));
    a.fill(1.0);
    b.fill(-2);
    d.fill(3.0);
    g.fill(4);
    h.fill(5.0);
    assert!(a.iter().all(|&v| v == 1.0) && d.iter().all(|&v| v == 3.0) && h.iter().all(|&v| v == 5.0));
    assert!(b.iter().all(|&v| v == -2) && g.iter().all(|&v| v == 4));
}

#[test]
fn asking_more_than_the_arena_holds_gives_short_regions_not_overlap() {
    let mut arena = Arena::new(&[64], "small arena").unwrap();
    let mut c = arena.carver();
    let a = c.f32s(64);
    let b = c.f32s(64);
    assert_eq!((a.len(), b.len()), (16, 0));
    a.fill(1.0);
    assert!(a.iter().all(|&v| v == 1.0));
}

#[test]
fn an_arena_whose_size_overflows_is_a_no_mem_error() {
    assert_eq!(total_bytes(&[usize::MAX]), None);
    assert_eq!(total_bytes(&[usize::MAX / 2, usize::MAX / 2]), None);
    for sizes in [&[usize::MAX][..], &[isize::MAX as usize, 64]] {
        let e = Arena::new(sizes, "test arena").err().expect("refused");
        assert_eq!(e.kind, ErrorKind::NoMem);
        assert!(e.message.contains("test arena"), "{}", e.message);
    }
}
