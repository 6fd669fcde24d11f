// The Java program of tests/e2e/packages/run.sh: two hot methods, named in the check's perf report.
// Usage: java HotMethods SECONDS   (prints "ready" once the loop runs, "done" at the end)
public class HotMethods {
    static long spinPrimes(long limit) {
        long count = 0;
        for (long n = 2; n < limit; n++) {
            boolean prime = true;
            for (long d = 2; d * d <= n; d++) {
                if (n % d == 0) { prime = false; break; }
            }
            if (prime) count++;
        }
        return count;
    }

    static double spinHarmonic(int terms) {
        double sum = 0;
        for (int i = 1; i <= terms; i++) sum += 1.0 / i;
        return sum;
    }

    public static void main(String[] args) {
        double seconds = args.length > 0 ? Double.parseDouble(args[0]) : 3;
        long deadline = System.nanoTime() + (long) (seconds * 1e9);
        long sink = 0;
        System.out.println("ready");
        System.out.flush();
        while (System.nanoTime() < deadline) {
            sink += spinPrimes(20_000);
            sink += (long) spinHarmonic(200_000);
        }
        System.out.println("done " + sink);
    }
}
