//! The helper functions a kernel's source needs, each written once.

/// The helper functions a writer has emitted calls to, in the order they were first needed.
/// A helper that calls another registers the callee first, so the list is already in the
/// order C needs (each definition before its first use).
#[derive(Default)]
pub struct Helpers {
    texts: Vec<String>,
}

impl Helpers {
    /// Adds a helper's whole text, unless the same text is already there.
    pub fn add(&mut self, text: String) {
        if !self.texts.contains(&text) {
            self.texts.push(text);
        }
    }

    /// The helpers' texts, first needed first.
    pub fn texts(&self) -> &[String] {
        &self.texts
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn helpers_keep_first_need_order_and_are_written_once() {
        let mut h = Helpers::default();
        h.add("b".into());
        h.add("a".into());
        h.add("b".into());
        assert_eq!(h.texts(), ["b", "a"]);
    }
}
