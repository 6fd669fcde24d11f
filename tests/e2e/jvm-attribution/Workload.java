// The JVM workload of the agent's end-to-end tests: three threads, named phaseA, phaseB and
// phaseC, each run only the code of one nested class (Workload$PhaseA, ...), which calls nothing
// outside its class: a sample taken in a phase thread inside JIT-compiled code belongs to that
// thread's class, the ground truth the checks (check_attribution.py, tests/e2e/attach/check.py,
// tests/e2e/record-running/run.sh) compare perf's names with.
//
// Arguments: one mode per kind of test.
// - SECONDS [PERIOD_MS] (run.sh beside this file; defaults 6 and 100): JIT-compiled code that is
//   thrown away and recompiled several times a second, so the code cache hands the same addresses
//   to different methods over time and only timestamps can tell which method a sample hit. The
//   main thread redefines one phase class every PERIOD_MS (round robin) with its own bytes;
//   HotSpot then discards the compiled code of that class and compiles it again once it is hot,
//   at an address the sweeper freed earlier (with a small code cache, see run.sh). Run as an
//   executable jar whose manifest names this class as Launcher-Agent-Class with
//   Can-Redefine-Classes (run.sh builds it), which hands agentmain the Instrumentation to
//   redefine with.
// - --until STOP_FILE (tests/e2e/attach/run.sh, tests/e2e/record-running/run.sh): a JVM that
//   runs hot, already JIT-compiled code when `perfclock attach` (or `record -p`) loads the agent
//   into it. "ready PID" is printed once the code had a second to get hot; the run ends once
//   STOP_FILE exists (or after 10 minutes), and the JVM stays alive meanwhile, so `perf inject`
//   can read its namespaces (run.sh says why).
import java.io.InputStream;
import java.lang.instrument.ClassDefinition;
import java.lang.instrument.Instrumentation;
import java.nio.file.Files;
import java.nio.file.Path;

public final class Workload {
    private static volatile boolean stop;
    private static volatile long sink;
    private static volatile Instrumentation instrumentation;

    /** Called by the launcher before main (Launcher-Agent-Class). */
    public static void agentmain(String args, Instrumentation inst) {
        instrumentation = inst;
    }

    // Each phase does different arithmetic, so its compiled code differs in size and layout.
    static final class PhaseA implements Runnable {
        static long step(long x) {
            for (int i = 0; i < 2000; i++) {
                x ^= x << 13;
                x ^= x >>> 7;
                x ^= x << 17;
                x += i;
            }
            return x;
        }

        @Override
        public void run() {
            long x = 1;
            while (!stop) {
                x = step(x);
                sink = x;
            }
        }
    }

    static final class PhaseB implements Runnable {
        static long step(long x) {
            for (int i = 0; i < 2000; i++) {
                x = x * 6364136223846793005L + 1442695040888963407L;
                x ^= x >>> 29;
            }
            return x;
        }

        @Override
        public void run() {
            long x = 2;
            while (!stop) {
                x = step(x);
                sink = x;
            }
        }
    }

    static final class PhaseC implements Runnable {
        static long step(long x) {
            long a = x | 1;
            for (int i = 0; i < 2000; i++) {
                a = (a * 31 + i) % 1_000_000_007L;
                x += a;
            }
            return x;
        }

        @Override
        public void run() {
            long x = 3;
            while (!stop) {
                x = step(x);
                sink = x;
            }
        }
    }

    private static byte[] classBytes(Class<?> c) throws Exception {
        String name = c.getName();
        try (InputStream in = c.getResourceAsStream(name.substring(name.lastIndexOf('.') + 1)
                + ".class")) {
            if (in == null) {
                throw new IllegalStateException("no class file for " + name);
            }
            return in.readAllBytes();
        }
    }

    private static Thread[] startPhases() {
        Thread[] threads = {
            new Thread(new PhaseA(), "phaseA"),
            new Thread(new PhaseB(), "phaseB"),
            new Thread(new PhaseC(), "phaseC"),
        };
        for (Thread t : threads) {
            t.start();
        }
        return threads;
    }

    private static void stopPhases(Thread[] threads) throws InterruptedException {
        stop = true;
        for (Thread t : threads) {
            t.join();
        }
    }

    /** SECONDS [PERIOD_MS]: one phase class redefined every PERIOD_MS. */
    private static void redefining(long seconds, long periodMs) throws Exception {
        if (instrumentation == null) {
            System.err.println("workload: no Instrumentation; run it as the jar run.sh builds "
                    + "(manifest Launcher-Agent-Class: Workload, Can-Redefine-Classes: true)");
            System.exit(2);
        }
        Class<?>[] phases = {PhaseA.class, PhaseB.class, PhaseC.class};
        byte[][] bytes = new byte[phases.length][];
        for (int i = 0; i < phases.length; i++) {
            bytes[i] = classBytes(phases[i]);
        }
        Thread[] threads = startPhases();
        long end = System.nanoTime() + seconds * 1_000_000_000L;
        int redefinitions = 0;
        while (System.nanoTime() < end) {
            Thread.sleep(periodMs);
            int i = redefinitions % phases.length;
            instrumentation.redefineClasses(new ClassDefinition(phases[i], bytes[i]));
            redefinitions++;
        }
        stopPhases(threads);
        System.out.println("workload: redefinitions=" + redefinitions + " sink=" + (sink & 0xff));
    }

    /** --until STOP_FILE: hot code, unchanged, until STOP_FILE exists. */
    private static void untilStopFile(Path stopFile) throws Exception {
        long end = System.nanoTime() + 600_000_000_000L;
        Thread[] threads = startPhases();
        Thread.sleep(1000);
        System.out.println("ready " + ProcessHandle.current().pid());
        System.out.flush();
        while (System.nanoTime() < end && !Files.exists(stopFile)) {
            Thread.sleep(50);
        }
        stopPhases(threads);
        System.out.println("workload: done sink=" + (sink & 0xff));
    }

    public static void main(String[] args) throws Exception {
        if (args.length > 0 && args[0].equals("--until")) {
            if (args.length != 2) {
                System.err.println("workload: --until takes one STOP_FILE");
                System.exit(2);
            }
            untilStopFile(Path.of(args[1]));
        } else {
            long seconds = args.length > 0 ? Long.parseLong(args[0]) : 6;
            long periodMs = args.length > 1 ? Long.parseLong(args[1]) : 100;
            redefining(seconds, periodMs);
        }
    }
}
