//! A map from file paths to values that keeps each directory's path once.
//!
//! The cleanup sweeper keeps one entry per unreferenced file waiting out its grace
//! period, hundreds of thousands under a busy load (`docs/performance.md`, "The heap at
//! the end of an hour"). Keyed by a full `PathBuf`, every entry would carry its own copy
//! of the warehouse, namespace and table directories (≈ 100 bytes of a ≈ 150-byte path);
//! here an entry holds its directory's number and its file name, and the directories are
//! kept once.

use std::collections::HashMap;
use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// A file's place in a [`FileMap`]: its directory's number and its file name.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(super) struct FileKey {
    dir: u32,
    name: Box<OsStr>,
}

/// Files (by path) to values of `V`, each directory's path kept once.
///
/// A directory stays numbered once its last file left, until
/// [`FileMap::forget_empty_dirs`] (a listing sweep calls it after dropping the files it
/// no longer found); its number is then given to the next new directory.
#[derive(Debug)]
pub(super) struct FileMap<V> {
    /// Each directory by its number (`None`: forgotten, free); the same allocation as
    /// its key in `dir_ids`.
    dirs: Vec<Option<Arc<Path>>>,
    dir_ids: HashMap<Arc<Path>, u32>,
    /// Numbers of forgotten directories, to give out again.
    free: Vec<u32>,
    files: HashMap<FileKey, V>,
}

impl<V> Default for FileMap<V> {
    fn default() -> Self {
        Self {
            dirs: Vec::new(),
            dir_ids: HashMap::new(),
            free: Vec::new(),
            files: HashMap::new(),
        }
    }
}

/// `path`'s directory and file name (`""` and the whole path when it has none).
fn split(path: &Path) -> (&Path, &OsStr) {
    match (path.parent(), path.file_name()) {
        (Some(dir), Some(name)) => (dir, name),
        _ => (Path::new(""), path.as_os_str()),
    }
}

impl<V> FileMap<V> {
    /// How many files.
    pub(super) fn len(&self) -> usize {
        self.files.len()
    }

    /// The key of `path` if its directory is numbered (the file itself need not be in
    /// the map).
    fn find(&self, path: &Path) -> Option<FileKey> {
        let (dir, name) = split(path);
        Some(FileKey {
            dir: *self.dir_ids.get(dir)?,
            name: name.into(),
        })
    }

    /// The key of `path`, numbering its directory if new.
    ///
    /// # Panics
    /// Past `u32::MAX` directories.
    fn key(&mut self, path: &Path) -> FileKey {
        let (dir, name) = split(path);
        let id = match self.dir_ids.get(dir) {
            Some(id) => *id,
            None => {
                let dir: Arc<Path> = Arc::from(dir);
                let id = match self.free.pop() {
                    Some(id) => {
                        self.dirs[id as usize] = Some(Arc::clone(&dir));
                        id
                    }
                    None => {
                        let id =
                            u32::try_from(self.dirs.len()).expect("fewer than 2^32 directories");
                        self.dirs.push(Some(Arc::clone(&dir)));
                        id
                    }
                };
                self.dir_ids.insert(dir, id);
                id
            }
        };
        FileKey {
            dir: id,
            name: name.into(),
        }
    }

    /// The directory numbered `id` (one a key of this map carries: numbered until no
    /// file is in it).
    fn dir(&self, id: u32) -> &Path {
        self.dirs[id as usize]
            .as_deref()
            .expect("a key's directory stays numbered while the key is in the map")
    }

    /// The path of `key`.
    pub(super) fn path(&self, key: &FileKey) -> PathBuf {
        self.dir(key.dir).join(&*key.name)
    }

    /// Whether `path` is in the map.
    pub(super) fn contains(&self, path: &Path) -> bool {
        self.find(path).is_some_and(|k| self.files.contains_key(&k))
    }

    /// Puts `value` in for `path` unless `path` is in the map already.
    pub(super) fn insert_if_absent(&mut self, path: &Path, value: V) {
        let key = self.key(path);
        self.files.entry(key).or_insert(value);
    }

    /// Puts `value` in for `path`, replacing what was there.
    pub(super) fn insert(&mut self, path: &Path, value: V) {
        let key = self.key(path);
        self.files.insert(key, value);
    }

    /// The value of `path`, to change.
    pub(super) fn get_mut(&mut self, path: &Path) -> Option<&mut V> {
        let key = self.find(path)?;
        self.files.get_mut(&key)
    }

    /// Keeps the files whose value `keep` (which may change it) holds for.
    pub(super) fn retain_values(&mut self, mut keep: impl FnMut(&mut V) -> bool) {
        self.files.retain(|_, value| keep(value));
    }

    /// Gives back the memory of a hash table sized for more files than it holds now,
    /// keeping room for a quarter more: a hash table never shrinks by itself, and the
    /// files waiting out the cleanup grace overshoot while the grace first fills, which
    /// would leave the table at up to twice the size it needs from then on
    /// (`docs/performance.md`, "The heap at the end of an hour"). A no-op unless the
    /// table would shrink, so the room kept is also the hysteresis: it grows again only
    /// a quarter past what it holds.
    pub(super) fn shrink_to_fit_loosely(&mut self) {
        let room = self.files.len() + self.files.len() / 4;
        self.files.shrink_to(room);
        self.dir_ids
            .shrink_to(self.dir_ids.len() + self.dir_ids.len() / 4);
    }

    /// How many files it has room for without growing.
    #[cfg(test)]
    fn capacity(&self) -> usize {
        self.files.capacity()
    }

    /// Forgets the directories no file is in; the files keep their keys.
    pub(super) fn forget_empty_dirs(&mut self) {
        let mut used = vec![false; self.dirs.len()];
        for key in self.files.keys() {
            used[key.dir as usize] = true;
        }
        for (id, slot) in self.dirs.iter_mut().enumerate() {
            if !used[id]
                && let Some(dir) = slot.take()
            {
                self.dir_ids.remove(&dir);
                self.free.push(id as u32);
            }
        }
    }

    /// Takes `path` out, with its value.
    pub(super) fn remove(&mut self, path: &Path) -> Option<V> {
        let key = self.find(path)?;
        self.files.remove(&key)
    }

    /// Takes `key` out, with its path and value.
    pub(super) fn take(&mut self, key: &FileKey) -> Option<(PathBuf, V)> {
        let value = self.files.remove(key)?;
        Some((self.path(key), value))
    }

    /// Keeps the files for which `keep(path)` holds (each path put together once).
    pub(super) fn retain(&mut self, mut keep: impl FnMut(&Path) -> bool) {
        let dirs = &self.dirs;
        self.files.retain(|key, _| {
            let dir = dirs[key.dir as usize]
                .as_deref()
                .expect("a key's directory stays numbered while the key is in the map");
            keep(&dir.join(&*key.name))
        });
    }

    /// The keys and values, in no order.
    pub(super) fn entries(&self) -> impl Iterator<Item = (&FileKey, &V)> {
        self.files.iter()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Catches: a file's path not coming back whole from its key (directory and name
    /// mixed up between files of one directory or of two), or a lookup finding a file
    /// of another directory with the same name.
    #[test]
    fn paths_come_back_whole_and_names_are_kept_apart_by_directory() {
        let mut map = FileMap::default();
        let a = Path::new("/w/ns/t/data/00000-0-a.parquet");
        let b = Path::new("/w/ns/t/data/00001-0-b.parquet");
        let same_name = Path::new("/w/ns/u/data/00000-0-a.parquet");
        let bare = Path::new("x.avro");
        map.insert(a, 1);
        map.insert(b, 2);
        map.insert(same_name, 3);
        map.insert_if_absent(bare, 4);
        map.insert_if_absent(a, 10);
        assert_eq!(map.len(), 4);
        assert_eq!(map.dirs.len(), 3, "one entry per directory");
        let mut got: Vec<(PathBuf, i32)> = map.entries().map(|(k, v)| (map.path(k), *v)).collect();
        got.sort();
        assert_eq!(
            got,
            vec![
                (PathBuf::from("/w/ns/t/data/00000-0-a.parquet"), 1),
                (PathBuf::from("/w/ns/t/data/00001-0-b.parquet"), 2),
                (PathBuf::from("/w/ns/u/data/00000-0-a.parquet"), 3),
                (PathBuf::from("x.avro"), 4),
            ]
        );
        assert!(map.contains(same_name));
        assert!(!map.contains(Path::new("/w/ns/v/data/00000-0-a.parquet")));
        assert_eq!(map.remove(same_name), Some(3));
        assert_eq!(map.remove(same_name), None);
        assert!(map.contains(a));
        let key = map.find(b).unwrap();
        assert_eq!(map.take(&key), Some((b.to_path_buf(), 2)));
        assert_eq!(map.len(), 2);
        map.retain(|p| p != a);
        let left: Vec<PathBuf> = map.entries().map(|(k, _)| map.path(k)).collect();
        assert_eq!(left, vec![PathBuf::from("x.avro")]);
    }

    /// Catches: a map that keeps the hash table of its peak after most files left (the
    /// cleanup's waiting files overshoot while the grace first fills), or one that
    /// shrinks below what it holds, loses a file doing so, or leaves no room for the
    /// next few files (a shrink then a grow every sweep).
    #[test]
    fn a_map_gives_back_the_room_of_its_peak_and_keeps_a_quarter() {
        let mut map = FileMap::default();
        let path = |i: usize| PathBuf::from(format!("/w/ns/t/metadata/{i:06}-u.metadata.json"));
        for i in 0..100_000 {
            map.insert(&path(i), i);
        }
        let peak = map.capacity();
        map.retain_values(|v| *v < 1_000);
        map.shrink_to_fit_loosely();
        assert!(
            map.capacity() >= 1_250 && map.capacity() < peak / 16,
            "{} of {peak}",
            map.capacity()
        );
        assert_eq!(map.len(), 1_000);
        assert_eq!(map.get_mut(&path(999)).copied(), Some(999));
        let roomy = map.capacity();
        map.shrink_to_fit_loosely();
        assert_eq!(map.capacity(), roomy, "a second call changes nothing");
    }

    /// Catches: a directory kept once its files are gone (a dropped table's directories
    /// held for the server's life), or a file losing its way when a forgotten
    /// directory's number goes to a new one.
    #[test]
    fn empty_directories_are_forgotten_and_the_rest_keep_their_files() {
        let mut map = FileMap::default();
        let gone = Path::new("/w/ns/dropped/metadata/snap-1.avro");
        let kept = [
            Path::new("/w/ns/t/metadata/snap-2.avro"),
            Path::new("/w/ns/t/data/a.parquet"),
        ];
        map.insert(gone, 1);
        for (i, p) in kept.iter().enumerate() {
            map.insert(p, 10 + i);
        }
        map.retain_values(|v| {
            *v += 100;
            *v != 101
        });
        map.forget_empty_dirs();
        assert_eq!(map.dir_ids.len(), 2);
        assert_eq!(map.dirs.iter().flatten().count(), 2);
        assert!(!map.contains(gone));
        assert_eq!(map.get_mut(kept[0]).copied(), Some(110));
        assert_eq!(map.get_mut(kept[1]).copied(), Some(111));
        let mut paths: Vec<PathBuf> = map.entries().map(|(k, _)| map.path(k)).collect();
        paths.sort();
        assert_eq!(paths, vec![kept[1].to_path_buf(), kept[0].to_path_buf()]);
        let other = Path::new("/w/ns/new/metadata/snap-3.avro");
        map.insert(other, 3);
        assert_eq!(
            map.dirs.len(),
            3,
            "a forgotten directory's number is given out again"
        );
        assert_eq!(map.get_mut(other).copied(), Some(3));
        assert_eq!(map.get_mut(kept[0]).copied(), Some(110));
        let mut paths: Vec<PathBuf> = map.entries().map(|(k, _)| map.path(k)).collect();
        paths.sort();
        assert_eq!(
            paths,
            vec![
                other.to_path_buf(),
                kept[1].to_path_buf(),
                kept[0].to_path_buf()
            ]
        );
    }
}
