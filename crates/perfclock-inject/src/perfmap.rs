//! Perf maps in time: the `/tmp/perf-<pid>.map` a runtime appends `START SIZE name` lines to
//! (Node's `--perf-basic-prof`, CPython's `-X perf`, .NET's `PerfMapEnabled=3`, HotSpot's
//! `Compiler.perfmap`, small JITs), followed while the recording runs, each line stamped with
//! the counter when it appeared.
//!
//! perf reads a perf map when it reports, with no notion of when a line was written: where a
//! runtime puts new code at an address it used before, every sample there gets one name. A
//! followed map becomes a jitdump (`perfclock_jitdump::write_timed_dump`, counter timestamps)
//! whose loads `perf inject --jit` maps at their times, so a sample is named after the code at
//! its address at its time.
//!
//! - **When a line counts.** [`FollowedMaps`] reads a map when its writer writes (`inotify`) and
//!   stamps the lines it completes with the counter read after the read, so a stamp is never
//!   before its write. The lines a map holds when it is first found count from the last time
//!   its process was looked at without one (from the start if it had one then): nothing of that
//!   map was at their addresses before. A sample between the runtime's placing new code and the
//!   stamp of its line is named after the code there before (docs/recorders.md gives the
//!   measured window).
//! - **Bounds.** At most [`MAX_MAP_BYTES`] of a map are followed and [`MAX_MAP_LINES`] lines
//!   kept; a line longer than [`MAX_LINE_BYTES`], or that is not `HEX HEX name`, or whose size
//!   is 0 or past [`perfclock_jitdump::MAX_CODE_BYTES`], is left out; each is a typed
//!   [`MapWarning`], and the rest of the map and of the recording go on.
//! - **Truncated or replaced.** A map shorter than what was read was truncated by its writer:
//!   it is read again from its start, what it holds now being new (a warning). A map whose path
//!   names another file than the one followed was replaced: the new one is followed (a
//!   warning); lines read before stay.
//! - The map is the runtime's: it is opened as an untrusted file and never written to.

use std::collections::HashMap;
use std::fmt;
use std::fs::File;
use std::io::Read;
use std::os::unix::fs::FileExt;
use std::path::PathBuf;
use std::time::Duration;

use perfclock_core::counter::read_counter_ordered_or_zero;
use perfclock_jitdump::MAX_CODE_BYTES;
use perfclock_os::inotify::{Inotify, Watch};
use perfclock_os::untrusted_file::{open_untrusted, Root, UntrustedFile, UntrustedFileError};

use crate::not_held::NotHeld;

/// The most bytes of one map followed.
pub const MAX_MAP_BYTES: u64 = 256 << 20;
/// The most lines of one map kept.
pub const MAX_MAP_LINES: usize = 4 << 20;
/// The most maps followed at once (each a descriptor and a watch).
pub const MAX_FOLLOWED: usize = 1024;
/// The most bytes read at once (a map found long, read in pieces).
const READ_CHUNK: usize = 1 << 20;
/// The bytes a map's first read asks for: a runtime appends a line or a few at a time.
const FIRST_READ_BYTES: usize = 4096;

/// How much of one map is followed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Bounds {
    /// Bytes.
    pub bytes: u64,
    /// Lines kept.
    pub lines: usize,
}

impl Default for Bounds {
    fn default() -> Self {
        Bounds {
            bytes: MAX_MAP_BYTES,
            lines: MAX_MAP_LINES,
        }
    }
}
/// The longest line taken (a name of a few KiB is long).
pub const MAX_LINE_BYTES: usize = 64 << 10;

/// One line of a map, stamped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MapLine {
    /// The counter when it was read (0: there when the map was first opened).
    pub counter: u64,
    /// The code's address.
    pub start: u64,
    /// Its size.
    pub size: u64,
    /// Its name.
    pub name: Box<[u8]>,
}

/// What was wrong with a followed map; the rest of it was followed.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum MapWarning {
    /// Lines that are not `HEX HEX name` (or hold a NUL), were left out: how many, and the
    /// first one's number.
    Garbage {
        /// How many.
        lines: u64,
        /// The first one's line number (1-based).
        first: u64,
    },
    /// Lines whose size is 0 or larger than any code, left out.
    AbsurdSize {
        /// How many.
        lines: u64,
        /// The first one's size.
        first_size: u64,
    },
    /// Lines longer than [`MAX_LINE_BYTES`], left out.
    LongLines {
        /// How many.
        lines: u64,
    },
    /// The map became shorter than what had been read: its writer truncated it.
    Truncated {
        /// Where reading had got to.
        at: u64,
        /// Its length then.
        len: u64,
    },
    /// Its path named another file: the new one was followed.
    Replaced,
    /// It grew past its bounds ([`MAX_MAP_BYTES`] and [`MAX_MAP_LINES`] unless told otherwise):
    /// what followed is not timed.
    TooLarge(Bounds),
    /// Reading it failed; what was read before stays.
    Unreadable(UntrustedFileError),
}

impl fmt::Display for MapWarning {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Garbage { lines, first } => write!(
                f,
                "{lines} line(s) are not `START SIZE name` in hex (the first: line {first}); left out"
            ),
            Self::AbsurdSize { lines, first_size } => write!(
                f,
                "{lines} line(s) give a size no code has (the first: {first_size:#x}); left out"
            ),
            Self::LongLines { lines } => {
                write!(f, "{lines} line(s) are longer than {MAX_LINE_BYTES} bytes; left out")
            }
            Self::Truncated { at, len } => write!(
                f,
                "its writer truncated it ({len} bytes, {at} had been read): followed from its new \
                 end"
            ),
            Self::Replaced => f.write_str("it was replaced by another file: the new one followed"),
            Self::TooLarge(bounds) => write!(
                f,
                "it grew past {} bytes or {} lines: what it holds after that is not timed",
                bounds.bytes, bounds.lines
            ),
            Self::Unreadable(error) => write!(f, "reading it failed ({error})"),
        }
    }
}

/// A map being followed.
#[derive(Debug)]
pub struct FollowedMap {
    /// The process, as the recording names it.
    pub process: u32,
    /// Its pid in its own pid namespace (another than `process` in a container).
    pub pid: u32,
    /// The map's path as the process sees it (`/tmp/perf-<pid in its namespace>.map`).
    pub path: PathBuf,
    /// Where the path resolves.
    pub root: Root,
    /// Its lines, in the order read.
    pub lines: Vec<MapLine>,
    /// What was wrong with it.
    pub warnings: Vec<MapWarning>,
    file: UntrustedFile,
    /// Where the next read starts.
    offset: u64,
    /// The last line read so far, not ended yet.
    partial: Vec<u8>,
    /// Within a line past [`MAX_LINE_BYTES`], dropped until its end.
    skipping_long: bool,
    /// Lines seen (the next one's number is this plus 1).
    line_number: u64,
    /// Past a bound: no more reading.
    stopped: bool,
    bounds: Bounds,
    /// Where reads land: grown as reads fill it, up to [`READ_CHUNK`].
    buffer: Vec<u8>,
}

impl FollowedMap {
    /// Opens process `process`'s perf map (`/tmp/perf-<pid>.map` in its root, the pid its own
    /// namespace's), if it has one, and reads what it holds: those lines count from counter
    /// value `since` (0: from the start).
    ///
    /// # Errors
    /// The map is there but cannot be opened as an untrusted file (with its path).
    pub fn open(
        process: u32,
        since: u64,
    ) -> Result<Option<FollowedMap>, (PathBuf, UntrustedFileError)> {
        FollowedMap::open_within(process, since, Bounds::default())
    }

    /// As [`FollowedMap::open`], following at most `bounds` of the map.
    ///
    /// # Errors
    /// As [`FollowedMap::open`]'s.
    pub fn open_within(
        process: u32,
        since: u64,
        bounds: Bounds,
    ) -> Result<Option<FollowedMap>, (PathBuf, UntrustedFileError)> {
        let mut map = FollowedMap::open_unread(process, bounds)?;
        if let Some(map) = &mut map {
            map.read_new(since);
        }
        Ok(map)
    }

    /// As [`FollowedMap::open_within`], nothing read yet: a watch on its writes is added
    /// before the first read, so no write falls between the two.
    fn open_unread(
        process: u32,
        bounds: Bounds,
    ) -> Result<Option<FollowedMap>, (PathBuf, UntrustedFileError)> {
        let Some(pid) = namespace_pid(process) else {
            return Ok(None);
        };
        let root = Root::of_process(process);
        let path = PathBuf::from(format!("/tmp/perf-{pid}.map"));
        // Any length: what is read of it is bounded below.
        let file = match open_untrusted(root, &path, u64::MAX) {
            Ok(file) => file,
            Err(UntrustedFileError::Resolve {
                errno: libc::ENOENT,
            }) => return Ok(None),
            Err(error) => return Err((path, error)),
        };
        Ok(Some(FollowedMap {
            process,
            pid,
            path,
            root,
            lines: Vec::new(),
            warnings: Vec::new(),
            file,
            offset: 0,
            partial: Vec::new(),
            skipping_long: false,
            line_number: 0,
            stopped: false,
            bounds,
            buffer: vec![0; FIRST_READ_BYTES],
        }))
    }

    /// Reads what was added since the last read; each line it completes gets `stamp()`, the
    /// counter read after the first of its bytes were (all of them were written by then).
    pub fn read_new_stamped(&mut self, stamp: impl FnOnce() -> u64) {
        let mut stamp = Some(stamp);
        let mut counter = 0;
        self.read_with(|| {
            if let Some(stamp) = stamp.take() {
                counter = stamp();
            }
            counter
        });
    }

    /// As [`FollowedMap::read_new_stamped`] with a known counter.
    fn read_new(&mut self, counter: u64) {
        self.read_with(|| counter);
    }

    /// Reads the bytes added since the last read, within the bounds, a piece at a time, each
    /// piece's lines stamped `counter()` called after the piece was read. Reads to the end
    /// without asking the length first: one system call when the writer appended a line; the
    /// length is asked only where nothing follows what was read, to tell a truncation.
    fn read_with(&mut self, mut counter: impl FnMut() -> u64) {
        let mut buffer = std::mem::take(&mut self.buffer);
        while !self.stopped {
            let room = self.bounds.bytes.saturating_sub(self.offset);
            if room == 0 {
                // At the bound: a byte past it is not followed.
                if self
                    .file
                    .file
                    .read_at(&mut [0u8], self.offset)
                    .is_ok_and(|n| n > 0)
                {
                    self.stop(MapWarning::TooLarge(self.bounds));
                }
                break;
            }
            let want = usize::try_from(room).map_or(buffer.len(), |room| room.min(buffer.len()));
            match self.file.file.read_at(&mut buffer[..want], self.offset) {
                Ok(0) => {
                    if !self.truncated() {
                        break;
                    }
                }
                Ok(read) => {
                    self.offset += read as u64;
                    let stamp = counter();
                    self.take_lines(&buffer[..read], stamp);
                    if read < want {
                        break;
                    }
                    if buffer.len() < READ_CHUNK {
                        buffer.resize(buffer.len() * 2, 0);
                    }
                }
                Err(error) if error.kind() == std::io::ErrorKind::Interrupted => {}
                Err(error) => self.stop(MapWarning::Unreadable(UntrustedFileError::Resolve {
                    errno: error.raw_os_error().unwrap_or(0),
                })),
            }
        }
        self.buffer = buffer;
    }

    /// Whether the map became shorter than what was read (its writer truncated it): if so,
    /// reading starts again from its start, with a warning.
    fn truncated(&mut self) -> bool {
        if let Err(error) = self.file.refresh(u64::MAX) {
            self.stop(MapWarning::Unreadable(error));
            return false;
        }
        let len = self.file.len;
        if len >= self.offset {
            return false;
        }
        self.warnings.push(MapWarning::Truncated {
            at: self.offset,
            len,
        });
        self.offset = 0;
        self.partial.clear();
        self.skipping_long = false;
        true
    }

    fn stop(&mut self, warning: MapWarning) {
        self.stopped = true;
        self.warnings.push(warning);
    }

    /// Splits `bytes` (after what was left of the last read) into lines, each stamped `counter`.
    fn take_lines(&mut self, bytes: &[u8], counter: u64) {
        let mut rest = bytes;
        while let Some(end) = rest.iter().position(|&b| b == b'\n') {
            let (line, after) = rest.split_at(end);
            rest = &after[1..];
            if std::mem::take(&mut self.skipping_long) {
                self.line_number += 1;
                self.count_long();
            } else if self.partial.is_empty() {
                self.take_line(line, counter);
            } else {
                let mut whole = std::mem::take(&mut self.partial);
                whole.extend_from_slice(line);
                self.take_line(&whole, counter);
            }
            if self.stopped {
                return;
            }
        }
        if self.skipping_long || self.partial.len() + rest.len() > MAX_LINE_BYTES {
            // A line this long is left out whole: what comes of it until its end is dropped.
            self.partial.clear();
            self.skipping_long = true;
        } else {
            self.partial.extend_from_slice(rest);
        }
    }

    fn take_line(&mut self, line: &[u8], counter: u64) {
        self.line_number += 1;
        if line.len() > MAX_LINE_BYTES {
            self.count_long();
            return;
        }
        match parse_line(line) {
            Ok((start, size, name)) => {
                if self.lines.len() >= self.bounds.lines {
                    self.stop(MapWarning::TooLarge(self.bounds));
                    return;
                }
                self.lines.push(MapLine {
                    counter,
                    start,
                    size,
                    name: name.into(),
                });
            }
            Err(LineError::Garbage) => {
                let number = self.line_number;
                match self.warnings.iter_mut().find_map(|w| match w {
                    MapWarning::Garbage { lines, .. } => Some(lines),
                    _ => None,
                }) {
                    Some(lines) => *lines += 1,
                    None => self.warnings.push(MapWarning::Garbage {
                        lines: 1,
                        first: number,
                    }),
                }
            }
            Err(LineError::Size(size)) => {
                match self.warnings.iter_mut().find_map(|w| match w {
                    MapWarning::AbsurdSize { lines, .. } => Some(lines),
                    _ => None,
                }) {
                    Some(lines) => *lines += 1,
                    None => self.warnings.push(MapWarning::AbsurdSize {
                        lines: 1,
                        first_size: size,
                    }),
                }
            }
        }
    }

    fn count_long(&mut self) {
        match self.warnings.iter_mut().find_map(|w| match w {
            MapWarning::LongLines { lines } => Some(lines),
            _ => None,
        }) {
            Some(lines) => *lines += 1,
            None => self.warnings.push(MapWarning::LongLines { lines: 1 }),
        }
    }

    /// Whether the map's path still names the file followed; if another, follows that one from
    /// its start (its lines stamped `counter`), with a warning: whether it did.
    pub fn follow_replacement(&mut self, counter: u64) -> bool {
        let replaced = self.take_replacement();
        if replaced {
            self.read_new(counter);
        }
        replaced
    }

    /// If the map's path names another file than the one followed, follows that one from its
    /// start (nothing read yet), with a warning: whether it did.
    fn take_replacement(&mut self) -> bool {
        if self.stopped {
            return false;
        }
        let Ok(now) = open_untrusted(self.root, &self.path, u64::MAX) else {
            return false;
        };
        if now.id == self.file.id {
            return false;
        }
        self.warnings.push(MapWarning::Replaced);
        self.file = now;
        self.offset = 0;
        self.partial.clear();
        self.skipping_long = false;
        true
    }
}

/// The perf maps of the processes a watch looks at, each read when its writer writes.
///
/// Each map followed has an inotify watch on its file; the host's `/tmp` has one for maps made
/// in it, so a process's map is found as it is made rather than at the process's next look (a
/// container's `/tmp` is looked at with its processes). Without inotify (or past its limits)
/// the maps are read at every [`FollowedMaps::wait`]'s end instead.
#[derive(Debug)]
pub struct FollowedMaps {
    inotify: Option<Inotify>,
    /// The watch of the host's `/tmp`, with the directory it is on.
    tmp: Option<(Watch, File)>,
    maps: Vec<FollowedMap>,
    watches: HashMap<Watch, usize>,
    /// The maps without a watch: read at the end of every wait.
    unwatched: Vec<usize>,
    by_process: HashMap<u32, usize>,
    refused: Vec<NotHeld>,
}

impl Default for FollowedMaps {
    fn default() -> Self {
        let inotify = Inotify::new().ok();
        let tmp = inotify.as_ref().and_then(|inotify| {
            let dir = File::open("/tmp").ok()?;
            Some((inotify.watch_names(&dir).ok()?, dir))
        });
        FollowedMaps {
            inotify,
            tmp,
            maps: Vec::new(),
            watches: HashMap::new(),
            unwatched: Vec::new(),
            by_process: HashMap::new(),
            refused: Vec::new(),
        }
    }
}

impl FollowedMaps {
    /// Looks at process `process`: follows its map if it has one now and none is followed (the
    /// lines it holds counting from counter value `since`), or follows the file now at the
    /// followed map's path if it was replaced.
    pub fn look(&mut self, process: u32, since: u64) {
        // Each file is watched before it is first read: a line written between the two would
        // otherwise wait for the next write to be read, and be stamped that late.
        if let Some(&index) = self.by_process.get(&process) {
            if self.maps[index].take_replacement() {
                self.add_watch(index);
                self.maps[index].read_new_stamped(read_counter_ordered_or_zero);
            }
            return;
        }
        if self.maps.len() >= MAX_FOLLOWED
            || self
                .refused
                .iter()
                .any(|refused| refused.process == process)
        {
            return;
        }
        match FollowedMap::open_unread(process, Bounds::default()) {
            Ok(Some(map)) => {
                let index = self.maps.len();
                self.maps.push(map);
                self.by_process.insert(process, index);
                self.add_watch(index);
                self.maps[index].read_new(since);
            }
            Ok(None) => {}
            Err((path, error)) => self.refused.push(NotHeld {
                process,
                path,
                error,
            }),
        }
    }

    fn add_watch(&mut self, index: usize) {
        let watch = self
            .inotify
            .as_ref()
            .and_then(|inotify| inotify.watch(&self.maps[index].file.file).ok());
        match watch {
            Some(watch) => {
                self.watches.insert(watch, index);
            }
            None if !self.unwatched.contains(&index) => self.unwatched.push(index),
            None => {}
        }
    }

    /// Waits at most `timeout` for writes to the maps and reads what was written; the pids that
    /// name maps made in the host's `/tmp` meanwhile (`perf-<pid>.map`), to be looked at.
    pub fn wait(&mut self, timeout: Duration) -> Vec<u32> {
        let events = match &self.inotify {
            Some(inotify) => inotify.wait(timeout).unwrap_or_default(),
            None => {
                std::thread::sleep(timeout);
                Vec::new()
            }
        };
        let mut made = Vec::new();
        for event in events {
            if self
                .tmp
                .as_ref()
                .is_some_and(|(tmp, _)| *tmp == event.watch)
            {
                let pid = event
                    .name
                    .as_ref()
                    .and_then(|name| name.to_str())
                    .and_then(|name| name.strip_prefix("perf-")?.strip_suffix(".map"))
                    .and_then(|pid| pid.parse::<u32>().ok());
                made.extend(pid);
            } else if let Some(&index) = self.watches.get(&event.watch) {
                self.maps[index].read_new_stamped(read_counter_ordered_or_zero);
            }
        }
        for &index in &self.unwatched {
            self.maps[index].read_new_stamped(read_counter_ordered_or_zero);
        }
        made
    }

    /// Reads every map one last time; the maps, and those that could not be opened.
    pub fn finish(mut self) -> (Vec<FollowedMap>, Vec<NotHeld>) {
        for map in &mut self.maps {
            map.read_new_stamped(read_counter_ordered_or_zero);
        }
        (self.maps, self.refused)
    }
}

/// Why a line was left out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum LineError {
    Garbage,
    Size(u64),
}

/// `START SIZE name`: two hex numbers (an `0x` before either is taken) and the rest of the line.
fn parse_line(line: &[u8]) -> Result<(u64, u64, &[u8]), LineError> {
    let mut fields = line.splitn(3, |&b| b == b' ');
    let (Some(start), Some(size), Some(name)) = (fields.next(), fields.next(), fields.next())
    else {
        return Err(LineError::Garbage);
    };
    let hex = |field: &[u8]| {
        let field = field.strip_prefix(b"0x").unwrap_or(field);
        std::str::from_utf8(field)
            .ok()
            .filter(|text| !text.is_empty() && text.len() <= 16)
            .and_then(|text| u64::from_str_radix(text, 16).ok())
    };
    let (Some(start), Some(size)) = (hex(start), hex(size)) else {
        return Err(LineError::Garbage);
    };
    let name = name.strip_suffix(b"\r").unwrap_or(name);
    if name.is_empty() || name.contains(&0) || start.checked_add(size).is_none() {
        return Err(LineError::Garbage);
    }
    if size == 0 || size > MAX_CODE_BYTES {
        return Err(LineError::Size(size));
    }
    Ok((start, size, name))
}

/// Process `process`'s pid in its own (innermost) pid namespace (`NSpid` of its status).
fn namespace_pid(process: u32) -> Option<u32> {
    let mut status = String::new();
    std::fs::File::open(format!("/proc/{process}/status"))
        .ok()?
        .take(64 * 1024)
        .read_to_string(&mut status)
        .ok()?;
    status
        .lines()
        .find_map(|line| line.strip_prefix("NSpid:"))
        .and_then(|pids| pids.split_whitespace().last())
        .and_then(|pid| pid.parse().ok())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    #[test]
    fn lines_parse_as_perf_reads_them() {
        assert_eq!(
            parse_line(b"7f0000001000 40 LazyCompile:*f /a b.js:1"),
            Ok((0x7f00_0000_1000, 0x40, &b"LazyCompile:*f /a b.js:1"[..]))
        );
        assert_eq!(
            parse_line(b"0x1000 0x10 py::f:/x.py"),
            Ok((0x1000, 0x10, &b"py::f:/x.py"[..]))
        );
        for garbage in [
            &b""[..],
            b"1000",
            b"1000 10",
            b"zz 10 f",
            b"1000 10 ",
            b"1000 10 a\0b",
        ] {
            assert_eq!(parse_line(garbage), Err(LineError::Garbage), "{garbage:?}");
        }
        assert_eq!(parse_line(b"1000 0 f"), Err(LineError::Size(0)));
        assert_eq!(
            parse_line(b"1000 ffffffff f"),
            Err(LineError::Size(0xffff_ffff))
        );
        assert_eq!(
            parse_line(b"ffffffffffffffff 10 f"),
            Err(LineError::Garbage)
        );
    }

    /// This process has one map path: one test at a time writes it.
    fn this_process_map() -> std::sync::MutexGuard<'static, ()> {
        static MAP: std::sync::Mutex<()> = std::sync::Mutex::new(());
        MAP.lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// A map of this process (`/tmp/perf-<pid>.map`) followed as it is written, truncated,
    /// replaced.
    #[test]
    fn a_map_is_followed_as_it_grows_and_changes() {
        let _map = this_process_map();
        let me = std::process::id();
        let path = PathBuf::from(format!("/tmp/perf-{me}.map"));
        let _ = std::fs::remove_file(&path);
        let mut writer = std::fs::File::create(&path).unwrap();
        writer.write_all(b"1000 10 before\n").unwrap();
        let mut map = FollowedMap::open(me, 0).unwrap().unwrap();
        assert_eq!(map.lines.len(), 1);
        assert_eq!(map.lines[0].counter, 0);
        writer.write_all(b"2000 20 after\n3000 3").unwrap();
        map.read_new_stamped(|| 7);
        writer
            .write_all(b"0 split\nnot a line\n1000 0 empty\n")
            .unwrap();
        map.read_new_stamped(|| 9);
        let seen: Vec<(u64, u64, &[u8])> = map
            .lines
            .iter()
            .map(|l| (l.counter, l.start, &l.name[..]))
            .collect();
        assert_eq!(
            seen,
            [
                (0, 0x1000, &b"before"[..]),
                (7, 0x2000, b"after"),
                (9, 0x3000, b"split")
            ]
        );
        assert!(map
            .warnings
            .contains(&MapWarning::Garbage { lines: 1, first: 4 }));
        assert!(map.warnings.contains(&MapWarning::AbsurdSize {
            lines: 1,
            first_size: 0
        }));
        // Truncated by its writer: followed from the new end.
        writer.set_len(0).unwrap();
        let mut writer = std::fs::OpenOptions::new()
            .append(true)
            .open(&path)
            .unwrap();
        writer.write_all(b"4000 10 again\n").unwrap();
        map.read_new_stamped(|| 11);
        assert!(
            matches!(map.warnings.last(), Some(MapWarning::Truncated { .. })),
            "{:?}",
            map.warnings
        );
        assert_eq!(map.lines.last().unwrap().name[..], b"again"[..]);
        // A line past the bound, in pieces: left out whole, the next one taken.
        let long = vec![b'x'; MAX_LINE_BYTES];
        writer.write_all(b"6000 10 ").unwrap();
        writer.write_all(&long).unwrap();
        map.read_new_stamped(|| 12);
        writer.write_all(&long).unwrap();
        writer.write_all(b"\n7000 10 short\n").unwrap();
        map.read_new_stamped(|| 12);
        assert!(map.warnings.contains(&MapWarning::LongLines { lines: 1 }));
        assert_eq!(map.lines.last().unwrap().name[..], b"short"[..]);
        // Replaced: a new file at the name.
        std::fs::remove_file(&path).unwrap();
        std::fs::write(&path, b"5000 10 new\n").unwrap();
        assert!(map.follow_replacement(13));
        assert!(!map.follow_replacement(14));
        assert_eq!(map.warnings.last(), Some(&MapWarning::Replaced));
        assert_eq!(map.lines.last().unwrap().name[..], b"new"[..]);
        assert_eq!(map.lines.last().unwrap().counter, 13);
        std::fs::remove_file(&path).unwrap();
    }

    /// A map growing past its bounds: what came before is kept, a warning says where it
    /// stopped, and nothing more is read.
    #[test]
    fn a_map_past_its_bounds_is_followed_no_further() {
        let _map = this_process_map();
        let me = std::process::id();
        let path = PathBuf::from(format!("/tmp/perf-{me}.map"));
        let _ = std::fs::remove_file(&path);
        let writer = std::fs::File::create(&path).unwrap();
        for (bounds, expect) in [
            (
                Bounds {
                    bytes: 1 << 20,
                    lines: 3,
                },
                3,
            ),
            // 12 bytes a line: the third ends past 30.
            (
                Bounds {
                    bytes: 30,
                    lines: 100,
                },
                2,
            ),
        ] {
            writer.set_len(0).unwrap();
            let mut writer = std::fs::OpenOptions::new()
                .append(true)
                .open(&path)
                .unwrap();
            writer.write_all(b"1000 10 a01\n2000 10 a02\n").unwrap();
            let mut map = FollowedMap::open_within(me, 0, bounds).unwrap().unwrap();
            for index in 3..10 {
                writeln!(writer, "{index}000 10 a{index:02}").unwrap();
                map.read_new_stamped(|| 5);
            }
            assert_eq!(map.lines.len(), expect, "{bounds:?}");
            assert_eq!(map.warnings, [MapWarning::TooLarge(bounds)]);
        }
        std::fs::remove_file(&path).unwrap();
    }
}
