// Workload of the agent's source-line and inlining end-to-end test (run.sh, check_lines.py).
//
// Thread "looper" runs spin(), whose hot loop is the one line marked HOT-LOOP: a sample of that
// thread in JIT-compiled code is in that loop, so perf must print this file and that line.
// Thread "inliner" runs outer(), which calls helper() in a loop; helper() is small, so C2
// inlines it into outer()'s compiled code, where it does nearly all the work (HELPER-LOOP):
// its samples must be named after helper(). The main thread calls System.gc() every 250 ms, so
// the agent's markers=DIR has GC pauses to write. The markers are looked up by check_lines.py,
// so the file may be edited freely. Argument: SECONDS (default 4).
public final class Lines {
    private static volatile boolean stop;
    private static volatile long sink;

    static long spin(long x) {
        for (int i = 0; i < 1_000_000; i++) { x = x * 6364136223846793005L + (x >>> 17) + i; } // HOT-LOOP
        return x;
    }

    static long helper(long x) {
        for (int i = 0; i < 300; i++) { x ^= x << 13; x ^= x >>> 7; x ^= x << 17; } // HELPER-LOOP
        return x;
    }

    static long outer(long x) {
        while (!stop) {
            x = helper(x);
            sink = x;
        }
        return x;
    }

    public static void main(String[] args) throws Exception {
        long seconds = args.length > 0 ? Long.parseLong(args[0]) : 4;
        Thread looper = new Thread(() -> {
            long x = 1;
            while (!stop) {
                x = spin(x);
                sink = x;
            }
        }, "looper");
        Thread inliner = new Thread(() -> outer(2), "inliner");
        looper.start();
        inliner.start();
        long end = System.nanoTime() + seconds * 1_000_000_000L;
        int collections = 0;
        while (System.nanoTime() < end) {
            Thread.sleep(250);
            System.gc();
            collections++;
        }
        stop = true;
        looper.join();
        inliner.join();
        System.out.println("lines: collections=" + collections + " sink=" + (sink & 0xff));
    }
}
