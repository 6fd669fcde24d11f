//! A `tracing` layer that writes each span, from creation to close, as a marker.

use std::fmt::{self, Write as _};

use tracing_core::field::{Field, Visit};
use tracing_core::span::{Attributes, Id, Record};
use tracing_core::Subscriber;
use tracing_subscriber::layer::{Context, Layer};
use tracing_subscriber::registry::LookupSpan;

use perfclock::Clock;

use crate::error::MarkerError;
use crate::writer::Markers;

/// Writes every closed span as a marker named `name field=value ...`, from the perf clock at its
/// creation to the perf clock at its close. Stack it on a `tracing_subscriber::Registry`:
///
/// ```no_run
/// use tracing_subscriber::layer::SubscriberExt;
/// let markers = perfclock_markers::Markers::open("/tmp")?;
/// let subscriber = tracing_subscriber::registry()
///     .with(perfclock_markers::MarkerLayer::new(markers.clone())?);
/// tracing::subscriber::set_global_default(subscriber).expect("no other subscriber");
/// # Ok::<(), perfclock_markers::MarkerError>(())
/// ```
/// A span's marker is written when its last handle is dropped, so a span entered several times
/// (an async task polled repeatedly) is one marker covering its whole life. The layer holds an
/// open clock, so a tracing callback never opens or calibrates one; a span whose start or end
/// the clock could not read (a read failure, not an unopened clock) is dropped and counted in
/// [`Markers::lost`].
#[derive(Debug, Clone)]
pub struct MarkerLayer {
    markers: Markers,
    clock: &'static Clock,
}

impl MarkerLayer {
    /// A layer writing to `markers`, stamping with the process-wide perf clock, which is
    /// opened now ([`perfclock::init`]) rather than at the first span.
    ///
    /// # Errors
    /// [`MarkerError::Clock`] if the perf clock cannot be opened.
    pub fn new(markers: Markers) -> Result<MarkerLayer, MarkerError> {
        let clock = perfclock::init().map_err(MarkerError::Clock)?;
        Ok(MarkerLayer::with_clock(markers, clock))
    }

    /// A layer writing to `markers`, stamping with `clock` (already open).
    pub fn with_clock(markers: Markers, clock: &'static Clock) -> MarkerLayer {
        MarkerLayer { markers, clock }
    }

    /// The clock's reading now; 0 if it cannot be read.
    fn now_ns(&self) -> u64 {
        self.clock.now_ns().unwrap_or(0)
    }
}

/// Stored in the span's extensions between creation and close.
struct Started {
    name: String,
    start_ns: u64,
}

/// Appends ` field=value` for each field.
struct FieldsToName<'a>(&'a mut String);

impl Visit for FieldsToName<'_> {
    fn record_str(&mut self, field: &Field, value: &str) {
        let _ = write!(self.0, " {}={value}", field.name());
    }

    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        let _ = write!(self.0, " {}={value:?}", field.name());
    }
}

impl<S> Layer<S> for MarkerLayer
where
    S: Subscriber + for<'a> LookupSpan<'a>,
{
    fn on_new_span(&self, attrs: &Attributes<'_>, id: &Id, ctx: Context<'_, S>) {
        let Some(span) = ctx.span(id) else {
            return;
        };
        let mut name = attrs.metadata().name().to_owned();
        attrs.record(&mut FieldsToName(&mut name));
        // 0: no reading (counted at close).
        let start_ns = self.now_ns();
        span.extensions_mut().insert(Started { name, start_ns });
    }

    /// Fields recorded after creation (`span.record("key", value)`, fields declared `Empty`)
    /// are appended to the marker's name, as at creation.
    fn on_record(&self, id: &Id, values: &Record<'_>, ctx: Context<'_, S>) {
        let Some(span) = ctx.span(id) else {
            return;
        };
        let mut extensions = span.extensions_mut();
        if let Some(started) = extensions.get_mut::<Started>() {
            values.record(&mut FieldsToName(&mut started.name));
        }
    }

    fn on_close(&self, id: Id, ctx: Context<'_, S>) {
        let end_ns = self.now_ns();
        let Some(span) = ctx.span(&id) else {
            return;
        };
        let extensions = span.extensions();
        let Some(started) = extensions.get::<Started>() else {
            return;
        };
        if started.start_ns == 0 || end_ns == 0 {
            self.markers.count_lost(1);
            return;
        }
        // A failed write is counted in `Markers::lost`.
        let _ = self.markers.span(
            &started.name,
            started.start_ns,
            end_ns.max(started.start_ns),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tracing_subscriber::layer::SubscriberExt;

    #[test]
    fn closed_spans_become_markers_with_their_fields() {
        // Without a clock every span is lost by design; with one, none may be.
        if let Err(error) = perfclock::init() {
            let test = "tracing layer content check";
            perfclock_testutil::skip(test, perfclock_testutil::Need::Perf, error);
            return;
        }
        let dir = std::env::temp_dir().join(format!("pcm-layer-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let markers = Markers::open(&dir).unwrap();
        let layer = MarkerLayer::new(markers.clone()).unwrap();
        let subscriber = tracing_subscriber::registry().with(layer);
        tracing::subscriber::with_default(subscriber, || {
            let outer = tracing::info_span!("outer", phase = 3, file = "a\nb");
            let _entered = outer.enter();
            let inner = tracing::info_span!("inner", late = tracing::field::Empty);
            inner.record("late", 7);
            drop(inner.enter());
        });
        markers.flush().unwrap();
        let text = std::fs::read_to_string(markers.path()).unwrap();
        assert_eq!(markers.lost(), 0, "markers lost with a clock: {text:?}");
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 2, "{text:?}");
        let parse = |l: &str| {
            let mut parts = l.splitn(3, ' ');
            let s: u64 = parts.next().unwrap().parse().unwrap();
            let e: u64 = parts.next().unwrap().parse().unwrap();
            (s, e, parts.next().unwrap().to_owned())
        };
        let (is, ie, iname) = parse(lines[0]);
        let (os, oe, oname) = parse(lines[1]);
        assert_eq!(iname, "inner late=7");
        assert_eq!(oname, "outer phase=3 file=a\u{fffd}b");
        assert!(os <= is && is <= ie && ie <= oe, "{text:?}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
