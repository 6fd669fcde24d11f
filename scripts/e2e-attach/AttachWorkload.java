// Workload for scripts/e2e-attach.sh: a JVM that runs hot, already JIT-compiled code when
// `perfclock attach` loads the agent into it.
//
// Three threads, named phaseA, phaseB and phaseC, each run only the code of one nested class
// (AttachWorkload$PhaseA, ...), which calls nothing outside its class: a sample taken in a phase
// thread inside JIT-compiled code belongs to that thread's class, the ground truth
// check.py compares perf's names with. "ready" is printed once the code had a second to get hot.
// Arguments: STOP_FILE: the run ends once that file exists (or after 10 minutes); the JVM stays
// alive meanwhile, so `perf inject` can read its namespaces (run.sh says why).
public final class AttachWorkload {
    private static volatile boolean stop;
    private static volatile long sink;

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

    public static void main(String[] args) throws Exception {
        java.nio.file.Path stopFile = java.nio.file.Path.of(args[0]);
        Thread[] threads = {
            new Thread(new PhaseA(), "phaseA"),
            new Thread(new PhaseB(), "phaseB"),
            new Thread(new PhaseC(), "phaseC"),
        };
        long end = System.nanoTime() + 600_000_000_000L;
        for (Thread t : threads) {
            t.start();
        }
        Thread.sleep(1000);
        System.out.println("ready " + ProcessHandle.current().pid());
        System.out.flush();
        while (System.nanoTime() < end && !java.nio.file.Files.exists(stopFile)) {
            Thread.sleep(50);
        }
        stop = true;
        for (Thread t : threads) {
            t.join();
        }
        System.out.println("workload: done sink=" + (sink & 0xff));
    }
}
