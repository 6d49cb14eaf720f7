//! What a sweep may remove: under which locations, given which references, grace
//! periods and write pins.

use super::*;

/// The locations a sweep may remove files under, each with whether its metadata JSON
/// files may go: the plain locations of the warehouse's storage of the swept tables
/// (a location shared with a table that keeps its metadata keeps it too), minus every
/// location of a table not swept (`gc.enabled=false` protects its location from the
/// other tables).
pub(super) fn swept_locations(store: &FileStore, tables: &[SweptTable]) -> Vec<(PathBuf, bool)> {
    let mut locations: Vec<(PathBuf, bool)> = Vec::new();
    for swept in tables.iter().filter(|t| t.sweep) {
        let Some(location) = store.path_of(swept.table.metadata().location()) else {
            continue;
        };
        match locations.iter_mut().find(|(l, _)| *l == location) {
            Some((_, delete_metadata)) => *delete_metadata &= swept.delete_metadata,
            None => locations.push((location, swept.delete_metadata)),
        }
    }
    let protected: HashSet<PathBuf> = tables
        .iter()
        .filter(|t| !t.sweep)
        .map(|t| local_path(t.table.metadata().location()))
        .collect();
    locations.retain(|(l, _)| !protected.contains(l));
    locations
}

/// A swept location's two directories, joined once (a listing asks for every file it
/// finds whether it lies under them), and whether its metadata JSON files may go.
#[derive(Debug)]
pub(super) struct SweptDirs {
    pub(super) data: PathBuf,
    pub(super) metadata: PathBuf,
    pub(super) delete_metadata: bool,
}

impl SweptDirs {
    pub(super) fn of(locations: Vec<(PathBuf, bool)>) -> Vec<Self> {
        locations
            .into_iter()
            .map(|(location, delete_metadata)| Self {
                data: location.join("data"),
                metadata: location.join("metadata"),
                delete_metadata,
            })
            .collect()
    }
}

/// The version number of a metadata JSON file named as Iceberg writers name them:
/// `<version>-<uuid>.metadata.json` (Java, iceberg-rust, pyiceberg) or
/// `v<version>.metadata.json` (Hadoop tables).
pub(super) fn metadata_version(path: &Path) -> Option<u64> {
    let name = path.file_name()?.to_str()?.strip_suffix(".metadata.json")?;
    let name = name.strip_prefix('v').unwrap_or(name);
    let digits = name.split('-').next()?;
    (!digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit()))
        .then(|| digits.parse().ok())
        .flatten()
}

/// Location → the oldest metadata version that the metadata logs (and current metadata
/// files) of the tables at that location name, for the tables whose every such file
/// carries a version ([`metadata_version`]); a location with a table that does not is
/// left out.
pub(super) fn metadata_floors(store: &FileStore, tables: &[SweptTable]) -> HashMap<PathBuf, u64> {
    let mut floors: HashMap<PathBuf, Option<u64>> = HashMap::new();
    for swept in tables {
        let metadata = swept.table.metadata();
        let Some(location) = store.path_of(metadata.location()) else {
            continue;
        };
        if swept.table.metadata_location().is_none() {
            floors.insert(location, None);
            continue;
        }
        let files = metadata
            .metadata_log()
            .iter()
            .map(|entry| entry.metadata_file.as_str())
            .chain(swept.table.metadata_location());
        let oldest = files
            .map(|file| metadata_version(Path::new(file)))
            .try_fold(u64::MAX, |min, v| v.map(|v| min.min(v)));
        let floor = floors.entry(location).or_insert(Some(u64::MAX));
        *floor = match (*floor, oldest) {
            (Some(a), Some(b)) => Some(a.min(b)),
            _ => None,
        };
    }
    floors
        .into_iter()
        .filter_map(|(location, floor)| Some((location, floor?)))
        .collect()
}

/// Where a directory lies among the swept locations ([`Rules::place`]).
#[derive(Debug, Clone, Copy)]
pub(super) struct Place {
    /// Under a location's `data/` (else under its `metadata/`).
    pub(super) in_data: bool,
    /// Whether that location's metadata JSON files may go.
    pub(super) delete_metadata: bool,
}

/// What a sweep may remove (module docs): under which locations, given which
/// references, grace periods and write pins.
pub(super) struct Rules<'a> {
    /// Swept locations, each with whether its metadata JSON files may go.
    pub(super) locations: &'a [SweptDirs],
    pub(super) referenced: &'a HashSet<PathBuf>,
    /// What the last sweep and the pass's observations found referenced.
    pub(super) was_referenced: &'a HashSet<PathBuf>,
    /// Location → the oldest metadata version its tables' metadata logs still name.
    pub(super) metadata_floors: &'a HashMap<PathBuf, u64>,
    pub(super) limits: Limits,
    pub(super) oldest_pin: Option<SystemTime>,
    /// Directory → its place ([`Self::place`]), worked out once per directory: a sweep
    /// that judges a listing asks for every file of it (hundreds of thousands under a
    /// busy load), and comparing each file with every location, component by component,
    /// would hold a runtime thread for seconds (`docs/performance.md`, "Judging a
    /// listing").
    /// (A mutex only so a sweep's future stays `Send`: one task uses it.)
    pub(super) places: Mutex<HashMap<PathBuf, Option<Place>>>,
}

impl<'a> Rules<'a> {
    pub(super) fn new(
        locations: &'a [SweptDirs],
        referenced: &'a HashSet<PathBuf>,
        was_referenced: &'a HashSet<PathBuf>,
        metadata_floors: &'a HashMap<PathBuf, u64>,
        limits: Limits,
        oldest_pin: Option<SystemTime>,
    ) -> Self {
        Self {
            locations,
            referenced,
            was_referenced,
            metadata_floors,
            limits,
            oldest_pin,
            places: Mutex::default(),
        }
    }

    /// The kind of `file` if a sweep may consider it at all: under a swept location's
    /// `data/` or `metadata/`, not referenced, and not a metadata JSON file its
    /// location keeps.
    pub(super) fn candidate(&self, file: &Path) -> Option<FileKind> {
        if self.referenced.contains(file) {
            return None;
        }
        let place = self.place(file.parent()?)?;
        let kind = FileKind::of(file, place.in_data);
        (kind != FileKind::Metadata || place.delete_metadata).then_some(kind)
    }

    /// The place of directory `dir`: under the first swept location (in order) whose
    /// `data/` or `metadata/` it is or lies under; `None` when under none.
    pub(super) fn place(&self, dir: &Path) -> Option<Place> {
        let mut places = self.places.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(place) = places.get(dir) {
            return *place;
        }
        let place = self.locations.iter().find_map(|location| {
            let in_data = dir.starts_with(&location.data);
            (in_data || dir.starts_with(&location.metadata)).then_some(Place {
                in_data,
                delete_metadata: location.delete_metadata,
            })
        });
        places.insert(dir.to_path_buf(), place);
        place
    }

    /// Whether `file` (of `kind`) belongs to a commit that landed or can no longer
    /// land: referenced at the last sweep or by a version a pass observed, or a metadata
    /// JSON whose version is older than every one its table's metadata log names (a
    /// commit in progress writes the version after its base, which the log holds, and
    /// a commit on an older base fails its compare-and-swap).
    pub(super) fn committed(&self, file: &Path, kind: FileKind) -> bool {
        if self.was_referenced.contains(file) {
            return true;
        }
        if kind != FileKind::Metadata {
            return false;
        }
        let (Some(version), Some(location)) =
            (metadata_version(file), file.parent().and_then(Path::parent))
        else {
            return false;
        };
        self.metadata_floors
            .get(location)
            .is_some_and(|floor| version < *floor)
    }

    /// Whether a waiting file may be removed now (at wall-clock time `wall`): its grace
    /// period has passed since a sweep first found it unreferenced, and it is neither
    /// young (modified within its grace period) nor held by a write in progress.
    /// (`now`: the same moment on the monotonic clock, against which `since` counts.)
    pub(super) fn due(&self, waiting: &Waiting, wall: SystemTime, now: Instant) -> bool {
        let grace = self.limits.grace_of(waiting.kind);
        // An unknown or future modification time counts as age 0: kept.
        let modified = waiting.modified.unwrap_or(wall);
        let young = wall.duration_since(modified).unwrap_or_default() < grace;
        !young
            && !waiting.pinned(self.oldest_pin, wall)
            && now.saturating_duration_since(waiting.since) >= grace
    }
}
