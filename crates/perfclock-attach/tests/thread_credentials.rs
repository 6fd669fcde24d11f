//! The attach's JVM-side steps run on a thread that becomes the JVM's user: that thread, and
//! only it, holds the JVM user's ids, no supplementary group and no capability.

use perfclock_os::peer;
use perfclock_testutil::{skip, Need};

#[test]
fn a_thread_becomes_another_user_without_roots_groups() {
    let test = perfclock_testutil::test_name!();
    if peer::effective_uid() != 0 {
        skip(
            test,
            Need::Root,
            "switching a thread's credentials needs root",
        );
        return;
    }
    // Root's group as a supplementary group, as a root login has it (glibc's wrapper: every
    // thread of this test process). The thread below must drop it.
    let groups: [libc::gid_t; 1] = [0];
    // SAFETY: setgroups reads `groups.len()` ids from a live local array.
    assert_eq!(unsafe { libc::setgroups(groups.len(), groups.as_ptr()) }, 0);
    let status = std::thread::spawn(|| {
        peer::become_user_on_this_thread(65534, 65534).unwrap();
        std::fs::read_to_string("/proc/thread-self/status").unwrap()
    })
    .join()
    .unwrap();
    let field = |name: &str| -> Vec<String> {
        status
            .lines()
            .find_map(|line| line.strip_prefix(name))
            .unwrap()
            .split_whitespace()
            .map(str::to_owned)
            .collect()
    };
    assert_eq!(field("Uid:"), ["65534"; 4]);
    assert_eq!(field("Gid:"), ["65534"; 4]);
    assert!(field("Groups:").is_empty(), "{status}");
    assert_eq!(field("CapEff:"), ["0000000000000000"]);
    assert_eq!(field("CapPrm:"), ["0000000000000000"]);
    // The rest of the process is untouched.
    assert_eq!((peer::effective_uid(), peer::effective_gid()), (0, 0));
    let ours = std::fs::read_to_string("/proc/thread-self/status").unwrap();
    assert!(ours.contains("\nGroups:\t0 \n"), "{ours}");
}
