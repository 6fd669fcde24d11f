import java.lang.reflect.InvocationHandler;
import java.lang.reflect.Proxy;
import java.util.function.LongUnaryOperator;

/**
 * The kinds of method whose names the agent's name test checks, each hot in a thread of its own
 * for the given seconds: a method whose name starts with an underscore, a lambda (a hidden
 * class), an inner class, a generated proxy class, a constructor and a static initializer.
 * Every hot method is kept out of its caller (-XX:CompileCommand=dontinline,Names*::*), so the
 * sample names the method itself.
 */
public class Names {
    static volatile long sink;

    /** A static initializer with a loop hot enough to be compiled (OSR) and sampled. */
    static final class Init {
        static long value;

        static {
            long x = 1;
            for (long i = 0; i < 3_000_000_000L; i++) {
                x = x * 6364136223846793005L + i;
            }
            value = x;
        }
    }

    /** An inner (non-static) class. */
    final class Inner {
        long step(long x) {
            for (int i = 0; i < 1000; i++) {
                x = x * 2862933555777941757L + 3037000493L;
            }
            return x;
        }
    }

    /** A constructor that does the work. */
    static final class Built {
        final long value;

        Built(long seed) {
            long x = seed;
            for (int i = 0; i < 1000; i++) {
                x = x * 3935559000370003845L + 2691343689449507681L;
            }
            value = x;
        }
    }

    interface Stepper {
        long step(long x);
    }

    static long __call__(long x) {
        for (int i = 0; i < 1000; i++) {
            x = x * 6364136223846793005L + 1442695040888963407L;
        }
        return x;
    }

    static long proxied(long x) {
        for (int i = 0; i < 1000; i++) {
            x = x * 1181783497276652981L + 7L;
        }
        return x;
    }

    static void spin(String name, long until, LongUnaryOperator body) {
        Thread thread = new Thread(() -> {
            long x = 1;
            while (System.nanoTime() < until) {
                x = body.applyAsLong(x);
            }
            sink = x;
        }, name);
        thread.start();
    }

    public static void main(String[] args) throws Exception {
        long until = System.nanoTime() + (long) (Double.parseDouble(args[0]) * 1e9);
        Names names = new Names();
        Inner inner = names.new Inner();
        InvocationHandler handler = (p, m, a) -> proxied((Long) a[0]);
        Stepper proxy = (Stepper) Proxy.newProxyInstance(
                Names.class.getClassLoader(), new Class<?>[] {Stepper.class}, handler);
        spin("underscore", until, Names::__call__);
        spin("lambda", until, x -> {
            for (int i = 0; i < 1000; i++) {
                x = x * 2806196910506780709L + 1L;
            }
            return x;
        });
        spin("inner", until, inner::step);
        spin("proxy", until, proxy::step);
        spin("ctor", until, x -> new Built(x).value);
        Thread clinit = new Thread(() -> sink = Init.value, "clinit");
        clinit.setDaemon(true);
        clinit.start();
        Thread.sleep((long) (Double.parseDouble(args[0]) * 1000) + 200);
    }
}
