// Workload for the perfclock JVMTI end-to-end test: enough allocation to trigger many
// collections whose pauses do real copying work (a retained set survives young collections),
// plus hot methods that the JIT compiles while perf samples them.
import java.util.ArrayList;

public final class Workload {
    private static volatile long sink;

    // Hot compute: JIT-compiled early, then dominates the samples of the main thread.
    static long mix(long x, int rounds) {
        for (int i = 0; i < rounds; i++) {
            x ^= x << 13;
            x ^= x >>> 7;
            x ^= x << 17;
            x += i;
        }
        return x;
    }

    static double polynomial(double x, int terms) {
        double acc = 0, p = 1;
        for (int i = 0; i < terms; i++) {
            acc += p / (i + 1);
            p *= x;
        }
        return acc;
    }

    // Allocation with a sliding retained window: survivors make each pause copy objects.
    static long churn(ArrayList<byte[]> retained, int allocations, int keepEvery) {
        long sum = 0;
        for (int i = 0; i < allocations; i++) {
            byte[] block = new byte[256 + (i & 1023)];
            block[0] = (byte) i;
            sum += block.length;
            if (i % keepEvery == 0) {
                retained.add(block);
                if (retained.size() > 60_000) {
                    retained.subList(0, 20_000).clear();
                }
            }
        }
        return sum;
    }

    public static void main(String[] args) throws Exception {
        long seconds = args.length > 0 ? Long.parseLong(args[0]) : 6;
        long end = System.nanoTime() + seconds * 1_000_000_000L;
        ArrayList<byte[]> retained = new ArrayList<>();
        long rounds = 0;
        while (System.nanoTime() < end) {
            sink += churn(retained, 200_000, 16);
            sink += mix(rounds, 2_000_000);
            sink += (long) polynomial(0.999, 500_000);
            if (++rounds % 25 == 0) {
                System.gc();
            }
        }
        System.out.println("workload: rounds=" + rounds + " retained=" + retained.size()
                + " sink=" + (sink & 0xff));
    }
}
