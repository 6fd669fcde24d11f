//! Symbol and source-file names of Java methods.

use crate::options::NameForm;

/// A method's symbol: class, method name and (with `with_signature`) its parameters.
///
/// [`NameForm::Java`]: `com.x.Foo$Inner.bar(int, java.lang.String[])`, the class as
/// `Class.getName()` and a Java stack trace write it (a hidden class keeps its `/0x...` suffix),
/// the parameter types as Java source writes them, no return type. perf's Java demangler leaves
/// such a name as it is (it only rewrites names with a `;` before the `(`), so every tool shows
/// the same name.
///
/// [`NameForm::Jvm`]: as perf's own agent writes it, `Lcom/x/Foo;bar(I)J` (perf demangles it to
/// `com.x.Foo.bar(int)`, other tools show it as written); with `dotted` the class is written
/// `com.x.Foo.` and the JVM signature kept.
pub(crate) fn method_symbol(
    class_signature: &[u8],
    name: &[u8],
    signature: &[u8],
    form: NameForm,
    dotted: bool,
    with_signature: bool,
) -> Vec<u8> {
    let mut out = Vec::with_capacity(class_signature.len() + name.len() + 2 * signature.len() + 2);
    match form {
        NameForm::Java => {
            java_class_name(&mut out, class_signature);
            out.push(b'.');
        }
        NameForm::Jvm if dotted => {
            out.extend(
                class_internal_name(class_signature)
                    .iter()
                    .map(|&b| match b {
                        b'/' => b'.',
                        b => b,
                    }),
            );
            out.push(b'.');
        }
        NameForm::Jvm => out.extend_from_slice(class_signature),
    }
    out.extend_from_slice(name);
    if with_signature {
        match form {
            NameForm::Java => java_parameters(&mut out, signature),
            NameForm::Jvm => out.extend_from_slice(signature),
        }
    }
    out
}

/// `Lcom/x/Foo;` -> `com/x/Foo` (other signatures, which no method's class has, as they are).
fn class_internal_name(class_signature: &[u8]) -> &[u8] {
    class_signature
        .strip_prefix(b"L")
        .and_then(|s| s.strip_suffix(b";"))
        .unwrap_or(class_signature)
}

/// Appends the class's binary name as `Class.getName()` gives it: `/` becomes `.`, and the `.`
/// that JVMTI puts before a hidden class's suffix (`LFoo$$Lambda.0x1;`, a character no other
/// class name holds) becomes the `/` of `Foo$$Lambda/0x1`.
fn java_class_name(out: &mut Vec<u8>, class_signature: &[u8]) {
    out.extend(
        class_internal_name(class_signature)
            .iter()
            .map(|&b| match b {
                b'/' => b'.',
                b'.' => b'/',
                b => b,
            }),
    );
}

/// Appends `(int, java.lang.String[])` for the descriptor `(ILjava/lang/String;)V`; a descriptor
/// that does not parse is appended as it is, so a name is never lost.
fn java_parameters(out: &mut Vec<u8>, descriptor: &[u8]) {
    let start = out.len();
    if parse_parameters(out, descriptor).is_none() {
        out.truncate(start);
        out.extend_from_slice(descriptor);
    }
}

fn parse_parameters(out: &mut Vec<u8>, descriptor: &[u8]) -> Option<()> {
    let mut rest = descriptor.strip_prefix(b"(")?;
    out.push(b'(');
    let mut first = true;
    loop {
        if let Some(after) = rest.strip_prefix(b")") {
            out.push(b')');
            // The return type is not part of a Java name; it must still be one type.
            return after.first().map(|_| ());
        }
        if !first {
            out.extend_from_slice(b", ");
        }
        first = false;
        let dimensions = rest.iter().take_while(|&&b| b == b'[').count();
        rest = &rest[dimensions..];
        let (&kind, after) = rest.split_first()?;
        rest = after;
        let primitive: &[u8] = match kind {
            b'B' => b"byte",
            b'C' => b"char",
            b'D' => b"double",
            b'F' => b"float",
            b'I' => b"int",
            b'J' => b"long",
            b'S' => b"short",
            b'Z' => b"boolean",
            b'L' => {
                let end = rest.iter().position(|&b| b == b';')?;
                let class = &rest[..end];
                if class.is_empty() || class.contains(&b')') {
                    return None;
                }
                out.extend(class.iter().map(|&b| if b == b'/' { b'.' } else { b }));
                rest = &rest[end + 1..];
                b""
            }
            _ => return None,
        };
        out.extend_from_slice(primitive);
        for _ in 0..dimensions {
            out.extend_from_slice(b"[]");
        }
    }
}

/// The source path perf's agent writes into a line entry: the class's package as directories
/// and its `SourceFile` attribute, `com/x/Foo.java` for `Lcom/x/Foo;` and `Foo.java`.
pub(crate) fn source_path(class_signature: &[u8], source_file: &[u8]) -> Vec<u8> {
    let inner = class_signature
        .strip_prefix(b"L")
        .and_then(|s| s.strip_suffix(b";"))
        .unwrap_or(b"");
    let mut out = match inner.iter().rposition(|&b| b == b'/') {
        Some(slash) => inner[..=slash].to_vec(),
        None => Vec::new(),
    };
    out.extend_from_slice(source_file);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn java(class: &str, name: &str, sig: &str) -> String {
        let symbol = method_symbol(
            class.as_bytes(),
            name.as_bytes(),
            sig.as_bytes(),
            NameForm::Java,
            false,
            true,
        );
        String::from_utf8(symbol).unwrap()
    }

    #[test]
    fn jvm_form_and_dotted_class() {
        let (c, n, s) = (&b"Lcom/x/Foo$Bar;"[..], &b"baz"[..], &b"(I)J"[..]);
        let jvm = |dotted, sig| method_symbol(c, n, s, NameForm::Jvm, dotted, sig);
        assert_eq!(jvm(false, true), b"Lcom/x/Foo$Bar;baz(I)J");
        assert_eq!(jvm(false, false), b"Lcom/x/Foo$Bar;baz");
        assert_eq!(jvm(true, true), b"com.x.Foo$Bar.baz(I)J");
        assert_eq!(jvm(true, false), b"com.x.Foo$Bar.baz");
        let top = method_symbol(b"LTop;", n, s, NameForm::Jvm, true, false);
        assert_eq!(top, b"Top.baz");
    }

    #[test]
    fn java_form() {
        assert_eq!(java("LUs;", "__call__", "(J)J"), "Us.__call__(long)");
        assert_eq!(
            java("Lcom/x/Foo$Inner;", "<init>", "(Lcom/x/Foo;[[I)V"),
            "com.x.Foo$Inner.<init>(com.x.Foo, int[][])"
        );
        assert_eq!(java("LFoo;", "<clinit>", "()V"), "Foo.<clinit>()");
        assert_eq!(
            java("LFoo;", "lambda$main$0", "(BCDFSZ[Ljava/lang/String;)Z"),
            "Foo.lambda$main$0(byte, char, double, float, short, boolean, java.lang.String[])"
        );
        assert_eq!(
            java("Lcom/x/Foo$$Lambda.0x000001000c00a000;", "run", "()V"),
            "com.x.Foo$$Lambda/0x000001000c00a000.run()"
        );
        let bare = method_symbol(
            b"Lcom/x/Foo;",
            b"bar",
            b"(I)J",
            NameForm::Java,
            false,
            false,
        );
        assert_eq!(bare, b"com.x.Foo.bar");
    }

    #[test]
    fn malformed_descriptors_are_kept_as_they_are() {
        for bad in [
            "",
            "I",
            "(",
            "(I",
            "(Q)V",
            "(L;)V",
            "(Ljava/lang/String)V",
            "([)V",
            "()",
        ] {
            assert_eq!(java("LFoo;", "m", bad), format!("Foo.m{bad}"), "{bad:?}");
        }
    }

    /// Arbitrary bytes never panic and always end in the name and something of the descriptor.
    #[test]
    fn arbitrary_descriptors_never_panic() {
        let alphabet = b"()[;LIJZV/x";
        let mut state = 0x9e37_79b9_7f4a_7c15_u64;
        for _ in 0..20_000 {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            let len = (state % 12) as usize;
            let descriptor: Vec<u8> = (0..len)
                .map(|i| alphabet[((state >> (i * 5)) % alphabet.len() as u64) as usize])
                .collect();
            let symbol = method_symbol(b"LA;", b"m", &descriptor, NameForm::Java, false, true);
            assert!(symbol.starts_with(b"A.m"));
        }
    }

    #[test]
    fn source_paths() {
        assert_eq!(
            source_path(b"Lcom/x/Foo$Bar;", b"Foo.java"),
            b"com/x/Foo.java"
        );
        assert_eq!(source_path(b"LTop;", b"Top.java"), b"Top.java");
        assert_eq!(source_path(b"", b"A.kt"), b"A.kt");
    }
}
