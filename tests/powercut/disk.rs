//! The disk that forgets (`forgetful_disk.py`, a FUSE filesystem) and the block stack on
//! it: a loop device attached in buffered mode, ext4 on that, mounted. Each piece is
//! torn down when dropped, by what this process started (its mount point, its loop
//! device, its daemon's pid), so a failing test leaves nothing behind.

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::time::{Duration, Instant};

/// The image size: ext4 with room for a long run's tables (data files are small).
pub(crate) const IMAGE_BYTES: u64 = 256 << 20;

/// Which pending writes a crash image keeps (see `forgetful_disk.py`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Policy {
    /// None: exactly the durable state.
    None,
    /// Each pending 4 KiB page with probability 1/2.
    Subset,
}

impl Policy {
    fn word(self) -> &'static str {
        match self {
            Policy::None => "none",
            Policy::Subset => "subset",
        }
    }
}

/// What a cut reported: pages pending at the cut, how many of them the image kept, and
/// the fsyncs of the image file so far.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct CutStats {
    pub(crate) pending: u64,
    pub(crate) kept: u64,
    pub(crate) syncs: u64,
}

fn repo() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// The python that runs the FUSE daemon (needs `mfusepy`): `SKADE_PYTHON`, else the
/// repository's `.venv`.
pub(crate) fn fuse_python() -> PathBuf {
    crate::server::python().unwrap_or_else(|| PathBuf::from("python3"))
}

/// Runs `program args`; its stdout, or a message with its status and stderr.
pub(crate) fn run(program: &str, args: &[&str]) -> Result<String, String> {
    let out = Command::new(program)
        .args(args)
        .output()
        .map_err(|e| format!("{program}: {e}"))?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
    } else {
        Err(format!(
            "{program} {args:?}: {}: {}{}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ))
    }
}

/// Why this machine cannot run the harness (not root, no `/dev/fuse`, a tool or
/// `mfusepy` missing), or `None` when it can.
pub(crate) fn missing() -> Option<String> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return Some("not root (losetup and mount need root)".into());
    }
    if !Path::new("/dev/fuse").exists() {
        return Some("no /dev/fuse".into());
    }
    if !Path::new("/dev/loop-control").exists() {
        return Some("no /dev/loop-control".into());
    }
    for tool in [
        "losetup",
        "mkfs.ext4",
        "e2fsck",
        "fusermount3",
        "mount",
        "umount",
        "cc",
    ] {
        if Command::new("sh")
            .args(["-c", &format!("command -v {tool}")])
            .output()
            .map_or(true, |o| !o.status.success())
        {
            return Some(format!("no {tool} (Debian: fuse3, e2fsprogs, mount, gcc)"));
        }
    }
    if let Err(e) = run(&fuse_python().to_string_lossy(), &["-c", "import mfusepy"]) {
        return Some(format!("no mfusepy in {}: {e}", fuse_python().display()));
    }
    None
}

/// Whether the harness can run here. Where it cannot, says why plainly and returns
/// `false` (the test is skipped) — except with `CI=true`, where it panics: CI runs as root
/// with `/dev/fuse` and loop devices, so a skip there would hide a broken setup.
pub(crate) fn available() -> bool {
    let Some(why) = missing() else { return true };
    if std::env::var("CI").ok().as_deref() == Some("true") {
        panic!("power-cut test cannot run in CI: {why}");
    }
    println!("power-cut test SKIPPED: {why}");
    false
}

/// Makes `file` a fresh ext4 filesystem of [`IMAGE_BYTES`] (mkfs on the plain file,
/// before any FUSE or loop device: making it is not what is tested).
pub(crate) fn mkfs(file: &Path) {
    let f = std::fs::File::create(file).expect("create the image");
    f.set_len(IMAGE_BYTES).expect("size the image");
    drop(f);
    run(
        "mkfs.ext4",
        &[
            "-q",
            "-F",
            "-b",
            "4096",
            "-E",
            "nodiscard,lazy_itable_init=0,lazy_journal_init=0",
            &file.to_string_lossy(),
        ],
    )
    .expect("mkfs.ext4");
}

/// A sparse copy of `from` at `to`.
pub(crate) fn copy_image(from: &Path, to: &Path) {
    run(
        "cp",
        &[
            "--sparse=always",
            &from.to_string_lossy(),
            &to.to_string_lossy(),
        ],
    )
    .expect("copy the image");
}

fn mounted(dir: &Path) -> bool {
    let dir = dir.to_string_lossy();
    std::fs::read_to_string("/proc/self/mountinfo").is_ok_and(|m| {
        m.lines()
            .any(|l| l.split(' ').nth(4).is_some_and(|p| p == dir))
    })
}

/// The FUSE daemon serving `disk.img` from a backing file; unmounted and reaped on drop.
pub(crate) struct ForgetfulDisk {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
    mountpoint: PathBuf,
}

impl ForgetfulDisk {
    /// Serves `backing` (the durable state) as `<mountpoint>/disk.img`; the daemon's
    /// stderr goes to `log`.
    pub(crate) fn start(backing: &Path, mountpoint: &Path, log: &Path) -> Self {
        std::fs::create_dir_all(mountpoint).expect("FUSE mount point");
        let log = std::fs::File::options()
            .create(true)
            .append(true)
            .open(log)
            .expect("FUSE log");
        let mut child = Command::new(fuse_python())
            .arg(repo().join("tests/powercut/forgetful_disk.py"))
            .arg(backing)
            .arg(mountpoint)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(log)
            .spawn()
            .expect("start forgetful_disk.py");
        let stdin = child.stdin.take().expect("stdin");
        let stdout = BufReader::new(child.stdout.take().expect("stdout"));
        let mut disk = Self {
            child,
            stdin,
            stdout,
            mountpoint: mountpoint.to_path_buf(),
        };
        let started = Instant::now();
        while !mounted(mountpoint) {
            if let Ok(Some(status)) = disk.child.try_wait() {
                panic!("forgetful_disk.py exited at start: {status} (see its log)");
            }
            assert!(
                started.elapsed() < Duration::from_secs(30),
                "forgetful_disk.py never mounted"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        disk.command("stats");
        disk
    }

    /// The image file on the FUSE mount.
    pub(crate) fn image(&self) -> PathBuf {
        self.mountpoint.join("disk.img")
    }

    fn command(&mut self, line: &str) -> String {
        writeln!(self.stdin, "{line}").expect("command to forgetful_disk.py");
        self.stdin.flush().expect("flush command");
        let mut answer = String::new();
        self.stdout
            .read_line(&mut answer)
            .expect("answer of forgetful_disk.py");
        assert!(
            answer.starts_with("ok"),
            "forgetful_disk.py: {line}: {answer}"
        );
        answer.trim().to_string()
    }

    fn stats_of(answer: &str) -> CutStats {
        let field = |name: &str| {
            answer
                .split(' ')
                .find_map(|w| w.strip_prefix(name)?.strip_prefix('=')?.parse().ok())
                .unwrap_or(0)
        };
        CutStats {
            pending: field("pending"),
            kept: field("kept"),
            syncs: field("syncs"),
        }
    }

    /// Writes the crash image of this instant to `image` (see [`Policy`]).
    pub(crate) fn cut(&mut self, image: &Path, policy: Policy, seed: u64) -> CutStats {
        let answer = self.command(&format!("cut {} {} {seed}", image.display(), policy.word()));
        Self::stats_of(&answer)
    }

    /// Arms a cut that the disk takes itself just before the `writes`-th write from now
    /// reaches it (inside a flush interval, typically mid-sync); after it every write and
    /// fsync blocks until [`Self::release`].
    pub(crate) fn arm(&mut self, writes: u64, image: &Path, policy: Policy, seed: u64) {
        self.command(&format!(
            "arm {writes} {} {} {seed}",
            image.display(),
            policy.word()
        ));
    }

    /// Waits up to `timeout` for the armed cut: its stats, or `None` (then disarmed).
    pub(crate) fn wait_armed(&mut self, timeout: Duration) -> Option<CutStats> {
        let answer = self.command(&format!("wait {}", timeout.as_secs_f64()));
        (answer != "ok none").then(|| Self::stats_of(&answer))
    }

    /// Lets the writes and fsyncs blocked since an armed cut go on.
    pub(crate) fn release(&mut self) {
        self.command("release");
    }

    /// Pages pending now and the fsyncs of the image so far.
    pub(crate) fn stats(&mut self) -> CutStats {
        let answer = self.command("stats");
        Self::stats_of(&answer)
    }
}

impl Drop for ForgetfulDisk {
    fn drop(&mut self) {
        // The loop device may release the file a moment after `losetup -d`: retry.
        let started = Instant::now();
        while mounted(&self.mountpoint) && started.elapsed() < Duration::from_secs(20) {
            if run("fusermount3", &["-u", &self.mountpoint.to_string_lossy()]).is_err() {
                std::thread::sleep(Duration::from_millis(100));
            }
        }
        let started = Instant::now();
        while let Ok(None) = self.child.try_wait() {
            if started.elapsed() > Duration::from_secs(20) {
                let _ = self.child.kill();
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        if mounted(&self.mountpoint) {
            // The daemon is gone; detach what is left so the test leaves no mount behind.
            let _ = run("umount", &["-l", &self.mountpoint.to_string_lossy()]);
        }
    }
}

/// A loop device on a file, attached buffered (`--direct-io=off`); detached on drop.
pub(crate) struct LoopDevice {
    pub(crate) dev: String,
}

impl LoopDevice {
    pub(crate) fn attach(file: &Path) -> Self {
        let dev = run(
            "losetup",
            &[
                "--find",
                "--show",
                "--direct-io=off",
                &file.to_string_lossy(),
            ],
        )
        .expect("losetup");
        Self { dev }
    }
}

impl Drop for LoopDevice {
    fn drop(&mut self) {
        let started = Instant::now();
        while let Err(e) = run("losetup", &["-d", &self.dev]) {
            if started.elapsed() > Duration::from_secs(20) {
                eprintln!("could not detach {}: {e}", self.dev);
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

/// An ext4 mount of a device on a directory; unmounted on drop.
pub(crate) struct Ext4Mount {
    pub(crate) dir: PathBuf,
}

impl Ext4Mount {
    pub(crate) fn mount(dev: &str, dir: &Path) -> Result<Self, String> {
        std::fs::create_dir_all(dir).expect("mount point");
        run("mount", &["-t", "ext4", dev, &dir.to_string_lossy()])?;
        Ok(Self {
            dir: dir.to_path_buf(),
        })
    }
}

impl Drop for Ext4Mount {
    fn drop(&mut self) {
        let started = Instant::now();
        while mounted(&self.dir) {
            match run("umount", &[&self.dir.to_string_lossy()]) {
                Ok(_) => return,
                Err(e) if started.elapsed() > Duration::from_secs(30) => {
                    eprintln!("could not unmount {}: {e}", self.dir.display());
                    return;
                }
                Err(_) => std::thread::sleep(Duration::from_millis(100)),
            }
        }
    }
}

/// ext4 on a loop device on the forgetful disk, mounted: dropped in that order (the
/// mount, then the loop device, then the FUSE daemon).
pub(crate) struct Stack {
    pub(crate) mount: Option<Ext4Mount>,
    pub(crate) device: Option<LoopDevice>,
    pub(crate) disk: ForgetfulDisk,
}

impl Stack {
    /// Serves `backing` through the forgetful disk and mounts its ext4 at `dir`.
    pub(crate) fn start(backing: &Path, fuse_dir: &Path, dir: &Path, log: &Path) -> Self {
        let disk = ForgetfulDisk::start(backing, fuse_dir, log);
        let device = LoopDevice::attach(&disk.image());
        let mount = Ext4Mount::mount(&device.dev, dir).expect("mount the forgetful disk");
        Self {
            mount: Some(mount),
            device: Some(device),
            disk,
        }
    }

    /// Unmounts and detaches, keeping the daemon (and its pending state) alive.
    pub(crate) fn unmount(&mut self) {
        self.mount.take();
        self.device.take();
    }
}

impl Drop for Stack {
    fn drop(&mut self) {
        self.unmount();
    }
}

/// What checking a crash image on a plain loop device found.
#[derive(Debug)]
pub(crate) struct FsckOutcome {
    /// `e2fsck -fn`'s exit status (0: no problem found).
    pub(crate) status: i32,
    pub(crate) output: String,
}

/// Checks the crash image `image` on a fresh loop device: mounts it (ext4 replays its
/// journal, as after a power loss), unmounts it, then `e2fsck -fn`. The image is left
/// recovered. An image that does not mount is an `Err`.
pub(crate) fn recover_and_fsck(image: &Path, dir: &Path) -> Result<FsckOutcome, String> {
    let device = LoopDevice::attach(image);
    drop(Ext4Mount::mount(&device.dev, dir)?);
    let out = Command::new("e2fsck")
        .args(["-fn", &device.dev])
        .output()
        .map_err(|e| format!("e2fsck: {e}"))?;
    Ok(FsckOutcome {
        status: out.status.code().unwrap_or(-1),
        output: format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
    })
}

/// Which syncs the negative control's `LD_PRELOAD` shim (`nosync.c`) turns into no-ops
/// that return success.
#[derive(Debug, Clone, Copy)]
pub(crate) enum NoSync {
    /// `fsync`, `fdatasync`, `syncfs`, `sync_file_range`, `msync` and `sync`.
    All,
    /// `syncfs` alone: the catalog's fsyncs work, the warehouse is never synced.
    Syncfs,
}

/// Builds the shim for `which` into `dir`; its path.
pub(crate) fn build_nosync_shim(dir: &Path, which: NoSync) -> PathBuf {
    let out = dir.join("nosync.so");
    let source = repo().join("tests/powercut/nosync.c");
    let (out_s, source_s) = (out.to_string_lossy(), source.to_string_lossy());
    let mut args = vec!["-shared", "-fPIC", "-O2", "-o", &out_s, &source_s];
    if let NoSync::Syncfs = which {
        args.push("-DONLY_SYNCFS");
    }
    run("cc", &args).expect("build the nosync shim");
    out
}
