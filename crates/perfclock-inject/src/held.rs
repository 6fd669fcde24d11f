//! Dumps opened while their processes live, read when the recording ends.
//!
//! A dump is read after the recording, when its process may be gone: a container's dump with
//! its mount namespace, a dump its runtime removed, a file in a private `/tmp`. While the
//! recording runs, a [`Watch`] looks at the recorded processes' mappings (`/proc/PID/maps`) and
//! opens every `jit-<pid>.dump` they map (and its time conversion record, if there is one) as an
//! untrusted file, inside the process's root ([`Root::of_process`]), keeping the descriptor:
//! the file is then read through it whatever became of its path, its process or its namespace.
//!
//! A process is looked at when the watch first sees it, again 0.2, 0.5, 1, 2 and 4 s later, then
//! every 8 s (runtimes map their dump as they start, an attached JVM's agent within the attach),
//! so a machine of many idle processes costs a few reads a second. A process that maps a dump
//! and exits within one poll interval (100 ms) of being started is read after the recording, as
//! without a watch.
//!
//! The same looks find the processes' perf maps, which the watch then follows as they grow
//! ([`crate::perfmap`]): between looks it waits on their writes.

use std::collections::HashMap;
use std::fs;
use std::io::Read as _;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use perfclock_core::counter::read_counter_ordered_or_zero;
use perfclock_os::time::{clock_gettime_ns, monotonic_ns, ClockId};
use perfclock_os::untrusted_file::{open_untrusted, Root, UntrustedFile};
use perfclock_perfdata::jitdump_pid;

use crate::dumps::MAX_DUMP_BYTES;
use crate::not_held::NotHeld;
use crate::perfmap::{FollowedMap, FollowedMaps};
use crate::sidecar::MAX_SIDECAR_BYTES;

/// How often the watch looks for new processes.
pub const POLL_INTERVAL: Duration = Duration::from_millis(100);
/// When a process is looked at again after it was first seen; then every last step.
const RESCANS: [Duration; 6] = [
    Duration::from_millis(200),
    Duration::from_millis(500),
    Duration::from_secs(1),
    Duration::from_secs(2),
    Duration::from_secs(4),
    Duration::from_secs(8),
];
/// The most CPU the watch's thread may take as a real-time thread, in parts per thousand of
/// one CPU over a poll interval.
const REALTIME_CPU_PERMILLE: u64 = 200;
/// The most dumps held open at once (each a descriptor).
pub const MAX_HELD: usize = 4096;
/// The longest `/proc/PID/maps` read (a JVM's is a few hundred KiB).
const MAX_MAPS_BYTES: u64 = 64 << 20;

/// One dump held open, with what is known of its process.
#[derive(Debug)]
pub struct Held {
    /// The dump.
    pub dump: UntrustedFile,
    /// Its time conversion record, if one was beside it.
    pub sidecar: Option<UntrustedFile>,
    /// The process's command name (`/proc/PID/comm`) when it was seen.
    pub command: String,
    /// Where the path was resolved.
    pub root: Root,
}

/// The dumps held, by (process, path as the process maps it), and the perf maps followed.
#[derive(Debug, Default)]
pub struct HeldDumps {
    held: Mutex<HashMap<(u32, PathBuf), Held>>,
    maps: Mutex<Vec<FollowedMap>>,
    refused: Mutex<Vec<NotHeld>>,
    /// The command names of the processes the watch saw, each once.
    commands: Mutex<Vec<String>>,
}

impl HeldDumps {
    /// Holds every `jit-<pid>.dump` process `pid` maps that is not held yet: how many it held.
    pub fn hold_mapped(&self, pid: u32) -> usize {
        let Some(maps) = read_maps(pid) else {
            return 0;
        };
        let mut count = 0;
        for path in jitdump_paths(&maps) {
            let key = (pid, path);
            if self.lock().contains_key(&key) {
                continue;
            }
            if self.lock().len() >= MAX_HELD {
                break;
            }
            let root = Root::of_process(pid);
            match open_untrusted(root, &key.1, MAX_DUMP_BYTES) {
                Ok(dump) => {
                    let mut sidecar_path = key.1.clone().into_os_string();
                    sidecar_path.push(perfclock_jitdump::timeconv::SUFFIX);
                    let sidecar =
                        open_untrusted(root, Path::new(&sidecar_path), MAX_SIDECAR_BYTES).ok();
                    let command = fs::read_to_string(format!("/proc/{pid}/comm"))
                        .map(|c| c.trim_end().to_owned())
                        .unwrap_or_default();
                    let held = Held {
                        dump,
                        sidecar,
                        command,
                        root,
                    };
                    self.lock().insert(key, held);
                    count += 1;
                }
                Err(error) => {
                    let mut refused = self.refused.lock().unwrap_or_else(PoisonError::into_inner);
                    if !refused.iter().any(|r| r.process == pid && r.path == key.1) {
                        refused.push(NotHeld {
                            process: pid,
                            path: key.1,
                            error,
                        });
                    }
                }
            }
        }
        count
    }

    /// Takes the dump `process` mapped at `path`, if it was held.
    pub fn take(&self, process: u32, path: &Path) -> Option<Held> {
        self.lock().remove(&(process, path.to_path_buf()))
    }

    /// Takes the perf maps followed.
    pub fn take_maps(&self) -> Vec<FollowedMap> {
        std::mem::take(&mut *self.maps.lock().unwrap_or_else(PoisonError::into_inner))
    }

    /// The processes and paths held, and their command names.
    pub fn list(&self) -> Vec<(u32, PathBuf, String)> {
        self.lock()
            .iter()
            .map(|((pid, path), held)| (*pid, path.clone(), held.command.clone()))
            .collect()
    }

    /// The command names (`comm`) of the processes a watch saw, each once.
    pub fn commands_seen(&self) -> Vec<String> {
        self.commands
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    fn saw(&self, pid: u32) {
        let Ok(command) = fs::read_to_string(format!("/proc/{pid}/comm")) else {
            return;
        };
        let command = command.trim_end();
        let mut commands = self.commands.lock().unwrap_or_else(PoisonError::into_inner);
        if !commands.iter().any(|seen| seen == command) && commands.len() < MAX_HELD {
            commands.push(command.to_owned());
        }
    }

    /// The dumps and maps that could not be held, and why.
    pub fn refused(&self) -> Vec<NotHeld> {
        self.refused
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<(u32, PathBuf), Held>> {
        self.held.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// `/proc/PID/maps`, bounded; `None` if the process is gone or not ours to read.
fn read_maps(pid: u32) -> Option<String> {
    let mut bytes = Vec::new();
    fs::File::open(format!("/proc/{pid}/maps"))
        .ok()?
        .take(MAX_MAPS_BYTES)
        .read_to_end(&mut bytes)
        .ok()?;
    Some(String::from_utf8_lossy(&bytes).into_owned())
}

/// The paths of the `jit-<pid>.dump` files a maps text names, once each. The kernel writes a
/// newline in a path as `\012`; a deleted file's path ends in ` (deleted)` and names nothing.
pub(crate) fn jitdump_paths(maps: &str) -> Vec<PathBuf> {
    let mut paths: Vec<PathBuf> = Vec::new();
    for line in maps.lines() {
        // Five fields, then the path (which may hold spaces) after the padding.
        let mut rest = line;
        for _ in 0..5 {
            rest = rest.trim_start();
            rest = rest.find(' ').map_or("", |at| &rest[at..]);
        }
        let path = rest.trim_start();
        if !path.starts_with('/') || path.ends_with(" (deleted)") {
            continue;
        }
        let path = PathBuf::from(path.replace("\\012", "\n"));
        if jitdump_pid(&path).is_some() && !paths.contains(&path) {
            paths.push(path);
        }
    }
    paths
}

/// Which processes a [`Watch`] looks at.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Scope {
    /// Every process of the machine.
    All,
    /// These processes and their descendants.
    Trees(Vec<u32>),
}

/// A thread that holds the dumps the processes of a [`Scope`] map, and follows their perf maps,
/// until [`Watch::finish`].
#[derive(Debug)]
pub struct Watch {
    stop: Arc<AtomicBool>,
    thread: JoinHandle<FollowedMaps>,
    held: Arc<HeldDumps>,
}

impl Watch {
    /// Starts watching `scope`, except the processes `skip` (perfclock, perf).
    ///
    /// # Errors
    /// If the thread cannot be started.
    pub fn start(scope: Scope, skip: Vec<u32>) -> std::io::Result<Watch> {
        let stop = Arc::new(AtomicBool::new(false));
        let held = Arc::new(HeldDumps::default());
        let thread = {
            let (stop, held) = (Arc::clone(&stop), Arc::clone(&held));
            thread::Builder::new()
                .name("perfclock-dumps".to_owned())
                .spawn(move || watch(&scope, &skip, &held, &stop))?
        };
        Ok(Watch { stop, thread, held })
    }

    /// Stops the thread, which looks at every process of the scope once more and reads every
    /// map to its end, and hands the dumps and maps over.
    pub fn finish(self) -> Arc<HeldDumps> {
        self.stop.store(true, Ordering::Relaxed);
        if let Ok(maps) = self.thread.join() {
            let (maps, refused) = maps.finish();
            *self
                .held
                .maps
                .lock()
                .unwrap_or_else(PoisonError::into_inner) = maps;
            self.held
                .refused
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .extend(refused);
        }
        self.held
    }
}

/// The watch's thread: looks at the processes of `scope` when due, and between looks waits on
/// their maps' writes; at `stop`, looks at every process once more.
fn watch(scope: &Scope, skip: &[u32], held: &HeldDumps, stop: &AtomicBool) -> FollowedMaps {
    let mut scheduling = Scheduling::start();
    let mut seen = Seen::default();
    let mut maps = FollowedMaps::default();
    let mut next_poll = Instant::now();
    while !stop.load(Ordering::Relaxed) {
        if Instant::now() >= next_poll {
            seen.poll(scope, skip, held, &mut maps);
            scheduling.check();
            next_poll = Instant::now() + POLL_INTERVAL;
        }
        for pid in maps.wait(next_poll.saturating_duration_since(Instant::now())) {
            match seen.last_look(pid) {
                Some(since) => maps.look(pid, since),
                // A process that made its map before the watch saw it: looked at now, while
                // its map holds a line or two, not at the next poll.
                None if in_scope(scope, skip).contains(&pid) => {
                    seen.look(pid, Instant::now(), held, &mut maps);
                }
                None => {}
            }
        }
    }
    for pid in in_scope(scope, skip) {
        held.hold_mapped(pid);
        maps.look(pid, seen.last_look(pid).unwrap_or(0));
    }
    maps
}

/// The watch's thread's scheduling. A map's line is stamped when this thread wakes after its
/// write, and a sample between the two is named after the code there before: on a busy
/// machine a normal thread waits for a CPU for milliseconds (up to a scheduler tick, 4 ms,
/// seen with a build on both CPUs; 36 ms once), a real-time one for microseconds. So it runs
/// as `SCHED_FIFO` where it may (root), and otherwise at the lowest nice value it may; and
/// should a writer keep it busy (a map written without pause) past
/// [`REALTIME_CPU_PERMILLE`] of a CPU over a poll interval, it becomes a normal thread for the
/// rest of the recording, so no process can make it hold a CPU.
struct Scheduling {
    realtime: bool,
    /// Its CPU time and the time at the last check, ns.
    checked: (u64, u64),
}

impl Scheduling {
    fn start() -> Scheduling {
        let _ = perfclock_os::thread::set_nice(-20);
        let realtime = perfclock_os::thread::set_realtime(Some(1)).is_ok();
        Scheduling {
            realtime,
            checked: Scheduling::now(),
        }
    }

    fn now() -> (u64, u64) {
        let cpu = clock_gettime_ns(ClockId::ThreadCpuTime).unwrap_or(0);
        (u64::try_from(cpu).unwrap_or(0), monotonic_ns())
    }

    fn check(&mut self) {
        if !self.realtime {
            return;
        }
        let (cpu, wall) = Scheduling::now();
        let (used, over) = (
            cpu - self.checked.0.min(cpu),
            wall - self.checked.1.min(wall),
        );
        self.checked = (cpu, wall);
        if used * 1000 > over * REALTIME_CPU_PERMILLE {
            self.realtime = perfclock_os::thread::set_realtime(None).is_err();
        }
    }
}

/// A process as the watch last saw it.
#[derive(Debug, Clone, Copy)]
struct Looks {
    /// Its start time in /proc/PID/stat.
    started: u64,
    /// When it is next due.
    next: Instant,
    /// How often it was looked at.
    count: usize,
    /// The counter when it was last looked at.
    counter: u64,
}

/// The processes a watch has seen: when each is due to be looked at again, and how often it was.
#[derive(Debug, Default)]
struct Seen {
    processes: HashMap<u32, Looks>,
}

impl Seen {
    fn poll(&mut self, scope: &Scope, skip: &[u32], held: &HeldDumps, maps: &mut FollowedMaps) {
        let now = Instant::now();
        let live = in_scope(scope, skip);
        self.processes.retain(|pid, _| live.contains(pid));
        for pid in live {
            if self
                .processes
                .get(&pid)
                .is_none_or(|looks| looks.next <= now)
            {
                self.look(pid, now, held, maps);
            }
        }
    }

    /// Looks at process `pid`: holds the dumps it maps and follows its map.
    fn look(&mut self, pid: u32, now: Instant, held: &HeldDumps, maps: &mut FollowedMaps) {
        let first = Looks {
            started: 0,
            next: now,
            count: 0,
            counter: 0,
        };
        let looks = match self.processes.get(&pid) {
            Some(&looks) => {
                // Still the process it was (its pid may have been taken again)?
                match start_time(pid) {
                    Some(started) if started == looks.started => looks,
                    Some(started) => Looks { started, ..first },
                    None => return,
                }
            }
            None => match start_time(pid) {
                Some(started) => {
                    held.saw(pid);
                    Looks { started, ..first }
                }
                None => return,
            },
        };
        // Read before looking: a map not there at this look was made after this counter.
        let counter = read_counter_ordered_or_zero();
        held.hold_mapped(pid);
        // A map there at the first look counts from the start.
        maps.look(pid, looks.counter);
        let step = RESCANS[looks.count.min(RESCANS.len() - 1)];
        self.processes.insert(
            pid,
            Looks {
                next: now + step,
                count: looks.count + 1,
                counter,
                ..looks
            },
        );
    }

    /// The counter when process `pid` was last looked at, if it was.
    fn last_look(&self, pid: u32) -> Option<u64> {
        self.processes.get(&pid).map(|looks| looks.counter)
    }
}

/// A process's start time (field 22 of `/proc/PID/stat`), which tells two processes of one
/// pid apart.
fn start_time(pid: u32) -> Option<u64> {
    stat_fields(pid)?.get(19)?.parse().ok()
}

/// The fields of `/proc/PID/stat` after the command name (`state` first).
fn stat_fields(pid: u32) -> Option<Vec<String>> {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let after = &stat[stat.rfind(')')? + 1..];
    Some(after.split_whitespace().map(str::to_owned).collect())
}

/// Every process now (pids of `/proc`).
fn processes() -> Vec<u32> {
    fs::read_dir("/proc")
        .map(|entries| {
            entries
                .flatten()
                .filter_map(|e| e.file_name().to_str()?.parse().ok())
                .collect()
        })
        .unwrap_or_default()
}

/// The children of process `pid`: those of each of its threads (`/proc/PID/task/TID/children`).
fn children(pid: u32) -> Vec<u32> {
    let Ok(tasks) = fs::read_dir(format!("/proc/{pid}/task")) else {
        return Vec::new();
    };
    tasks
        .flatten()
        .filter_map(|task| fs::read_to_string(task.path().join("children")).ok())
        .flat_map(|text| {
            text.split_whitespace()
                .filter_map(|pid| pid.parse().ok())
                .collect::<Vec<u32>>()
        })
        .collect()
}

/// The processes of `scope` now, without `skip`.
fn in_scope(scope: &Scope, skip: &[u32]) -> Vec<u32> {
    let chosen = match scope {
        Scope::All => processes(),
        Scope::Trees(roots) => {
            let mut found: Vec<u32> = Vec::new();
            let mut next: Vec<u32> = roots.clone();
            while let Some(pid) = next.pop() {
                if found.contains(&pid) || found.len() >= MAX_HELD {
                    continue;
                }
                found.push(pid);
                next.extend(children(pid));
            }
            found
        }
    };
    chosen
        .into_iter()
        .filter(|pid| !skip.contains(pid))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dump_paths_are_read_from_maps() {
        let maps = "\
7f0000000000-7f0000001000 r-xp 00000000 fd:01 1234                       /tmp/jit-77.dump
7f0000001000-7f0000002000 r-xp 00000000 fd:01 1234                       /tmp/jit-77.dump
7f0000003000-7f0000004000 r-xp 00000000 00:2a 99                         /srv/my app/jit-1.dump
7f0000005000-7f0000006000 r-xp 00000000 00:2a 98                         /srv/new\\012line/jit-2.dump
7f0000007000-7f0000008000 r-xp 00000000 00:2a 97                         /tmp/jit-3.dump (deleted)
7f0000009000-7f000000a000 r--p 00000000 fd:01 5                          /usr/lib/libc.so.6
7f000000b000-7f000000c000 rw-p 00000000 00:00 0                          [heap]
7f000000d000-7f000000e000 rw-p 00000000 00:00 0
";
        assert_eq!(
            jitdump_paths(maps),
            [
                PathBuf::from("/tmp/jit-77.dump"),
                PathBuf::from("/srv/my app/jit-1.dump"),
                PathBuf::from("/srv/new\nline/jit-2.dump"),
            ]
        );
    }

    #[test]
    fn a_tree_is_this_process_and_its_children() {
        let mut child = std::process::Command::new("sleep")
            .arg("5")
            .spawn()
            .unwrap();
        let me = std::process::id();
        let tree = in_scope(&Scope::Trees(vec![me]), &[]);
        let _ = child.kill();
        let _ = child.wait();
        assert!(tree.contains(&me) && tree.contains(&child.id()), "{tree:?}");
        assert!(!in_scope(&Scope::Trees(vec![me]), &[me]).contains(&me));
    }
}
