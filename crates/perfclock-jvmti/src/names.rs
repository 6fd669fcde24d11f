//! Symbol and source-file names of Java methods.

/// A method's symbol: class, method name and (with `signature`) JVM signature. By default as
/// perf's own agent writes it, `Lcom/x/Foo;bar(I)J`, which perf demangles to
/// `com.x.Foo.bar(int)`; with `dotted` the class is written `com.x.Foo.` as in a Java stack
/// trace (perf then shows the name as written).
pub(crate) fn method_symbol(
    class_signature: &[u8],
    name: &[u8],
    signature: &[u8],
    dotted: bool,
    with_signature: bool,
) -> Vec<u8> {
    let mut out = Vec::with_capacity(class_signature.len() + name.len() + signature.len() + 1);
    if dotted {
        out.extend(dotted_class(class_signature));
        out.push(b'.');
    } else {
        out.extend_from_slice(class_signature);
    }
    out.extend_from_slice(name);
    if with_signature {
        out.extend_from_slice(signature);
    }
    out
}

/// `Lcom/x/Foo;` -> `com.x.Foo` (other signatures, which no method's class has, as they are).
fn dotted_class(class_signature: &[u8]) -> impl Iterator<Item = u8> + '_ {
    let inner = class_signature
        .strip_prefix(b"L")
        .and_then(|s| s.strip_suffix(b";"))
        .unwrap_or(class_signature);
    inner.iter().map(|&b| if b == b'/' { b'.' } else { b })
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

    #[test]
    fn symbols() {
        let (c, n, s) = (&b"Lcom/x/Foo$Bar;"[..], &b"baz"[..], &b"(I)J"[..]);
        assert_eq!(
            method_symbol(c, n, s, false, true),
            b"Lcom/x/Foo$Bar;baz(I)J"
        );
        assert_eq!(method_symbol(c, n, s, false, false), b"Lcom/x/Foo$Bar;baz");
        assert_eq!(method_symbol(c, n, s, true, true), b"com.x.Foo$Bar.baz(I)J");
        assert_eq!(method_symbol(c, n, s, true, false), b"com.x.Foo$Bar.baz");
        assert_eq!(method_symbol(b"LTop;", n, s, true, false), b"Top.baz");
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
