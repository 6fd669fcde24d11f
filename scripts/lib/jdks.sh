# shellcheck shell=bash
# The JDKs the end-to-end scripts run on. Source it.
#
# perfclock_jdks
#   Prints the home of every JDK under /usr/lib/jvm whose bin/java and bin/javac are executable,
#   one per line, each once (Debian installs one JDK under several names, as symlinks).

perfclock_jdks() {
    local java
    for java in /usr/lib/jvm/*/bin/java; do
        [ -x "$java" ] && [ -x "${java%/java}/javac" ] && readlink -f "${java%/bin/java}"
    done | sort -u
}
