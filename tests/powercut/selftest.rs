//! The disk itself: a write without an fsync is not in a crash image, one with is; the
//! `subset` policy keeps whole pages; through ext4 on a loop device, a file fsynced (with
//! its directory) survives a cut and one never synced does not, and the image checks
//! clean after journal recovery.

use std::io::Write;
use std::os::unix::fs::FileExt;

use crate::disk::*;

const PAGE: usize = 4096;

#[test]
#[ignore = "power-cut harness: needs root, /dev/fuse and loop devices; run by tests/run.sh"]
fn forgetful_disk_keeps_only_synced_writes() {
    if !available() {
        return;
    }
    let dir = tempfile::Builder::new()
        .prefix("skade-powercut-selftest-")
        .tempdir()
        .unwrap();
    let log = dir.path().join("fuse.log");

    // The file itself: page 0 synced, pages 1..=64 pending.
    let raw = dir.path().join("raw.img");
    std::fs::File::create(&raw)
        .unwrap()
        .set_len(1 << 20)
        .unwrap();
    let mut disk = ForgetfulDisk::start(&raw, &dir.path().join("fuse-raw"), &log);
    let file = std::fs::File::options()
        .read(true)
        .write(true)
        .open(disk.image())
        .unwrap();
    file.write_all_at(&[b'A'; PAGE], 0).unwrap();
    file.sync_data().unwrap();
    file.write_all_at(&[b'B'; 64 * PAGE], PAGE as u64).unwrap();
    let mut back = vec![0; PAGE];
    file.read_exact_at(&mut back, 10 * PAGE as u64).unwrap();
    assert_eq!(back, [b'B'; PAGE], "reads see pending writes");
    let none = dir.path().join("none.img");
    let stats = disk.cut(&none, Policy::None, 1);
    assert_eq!((stats.pending, stats.kept), (64, 0), "{stats:?}");
    let image = std::fs::read(&none).unwrap();
    assert_eq!(&image[..PAGE], &[b'A'; PAGE], "the synced page is kept");
    assert!(
        image[PAGE..].iter().all(|&b| b == 0),
        "a write never synced is not in the crash image"
    );
    let subset = dir.path().join("subset.img");
    let stats = disk.cut(&subset, Policy::Subset, 7);
    let image = std::fs::read(&subset).unwrap();
    let kept = (1..=64)
        .filter(|n| {
            let page = &image[n * PAGE..(n + 1) * PAGE];
            assert!(
                page.iter().all(|&b| b == 0) || page.iter().all(|&b| b == b'B'),
                "page {n} is torn"
            );
            page[0] == b'B'
        })
        .count() as u64;
    assert_eq!(kept, stats.kept, "{stats:?}");
    assert!(0 < kept && kept < 64, "subset kept {kept} of 64 pages");
    drop(file);
    drop(disk);

    // Through the block stack: ext4 on a buffered loop device on the disk.
    let backing = dir.path().join("ext4.img");
    mkfs(&backing);
    let mount_dir = dir.path().join("mnt");
    let mut stack = Stack::start(&backing, &dir.path().join("fuse"), &mount_dir, &log);
    let syncs = stack.disk.stats().syncs;
    let mut kept = std::fs::File::create(mount_dir.join("kept")).unwrap();
    kept.write_all(b"synced before the cut").unwrap();
    kept.sync_all().unwrap();
    std::fs::File::open(&mount_dir).unwrap().sync_all().unwrap();
    assert!(
        stack.disk.stats().syncs > syncs,
        "an fsync on ext4 reaches the disk as an fsync of its image"
    );
    std::fs::write(mount_dir.join("lost"), b"never synced").unwrap();
    assert!(mount_dir.join("lost").exists());
    let cut = dir.path().join("cut.img");
    stack.disk.cut(&cut, Policy::None, 1);
    drop(kept);
    drop(stack);

    let fsck = recover_and_fsck(&cut, &dir.path().join("check")).expect("the image mounts");
    assert_eq!(fsck.status, 0, "e2fsck -fn: {}", fsck.output);
    let device = LoopDevice::attach(&cut);
    let mount = Ext4Mount::mount(&device.dev, &dir.path().join("check")).unwrap();
    assert_eq!(
        std::fs::read(mount.dir.join("kept")).ok().as_deref(),
        Some(&b"synced before the cut"[..]),
        "a file fsynced with its directory survives the cut"
    );
    assert!(
        !mount.dir.join("lost").exists(),
        "a file never synced is not in the crash image"
    );
}
