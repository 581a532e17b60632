//! Who moved a row and why: the note a history row records.

use crate::error::Error;

/// Who moved a row and why, recorded in its history row: an actor, a
/// reason and a JSON document of details, each optional. Attach one with
/// [`Transition::noted`](crate::Transition::noted); moves without one
/// record NULLs.
///
/// ```text
/// PayoutStatus::cancel()
///     .noted(Note::by("alice@ops").because("customer asked").details(r#"{"ticket": 4211}"#))
///     .apply(&pool, 42)
///     .await?;
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Note {
    actor: Option<String>,
    reason: Option<String>,
    details: Option<String>,
}

impl Note {
    /// No actor, reason or details.
    pub const NONE: Note = Note {
        actor: None,
        reason: None,
        details: None,
    };

    /// A note naming the actor.
    pub fn by(actor: impl Into<String>) -> Self {
        Note {
            actor: Some(actor.into()),
            ..Note::NONE
        }
    }

    /// The same note, with a reason.
    pub fn because(self, reason: impl Into<String>) -> Self {
        Note {
            reason: Some(reason.into()),
            ..self
        }
    }

    /// The same note, with details: a JSON document. One that is not JSON
    /// refuses the move: the call checks it before it sends anything, and
    /// answers [`Error::NoteDetails`] (of kind
    /// [`Data`](crate::ErrorKind::Data)) on every backend.
    pub fn details(self, json: impl Into<String>) -> Self {
        Note {
            details: Some(json.into()),
            ..self
        }
    }

    /// The actor, if any.
    pub fn actor(&self) -> Option<&str> {
        self.actor.as_deref()
    }

    /// The reason, if any.
    pub fn reason(&self) -> Option<&str> {
        self.reason.as_deref()
    }

    /// The details, if any.
    pub fn detail_json(&self) -> Option<&str> {
        self.details.as_deref()
    }

    /// [`Error::NoteDetails`] when the details are not a JSON document:
    /// checked before any statement of `transition` on `table` is sent,
    /// so that every backend refuses them alike and nothing moves.
    pub(crate) fn checked(
        &self,
        table: &'static str,
        transition: &'static str,
    ) -> Result<(), Error> {
        let Some(json) = &self.details else {
            return Ok(());
        };
        // Read as it stands, numbers unconverted: a number beyond `f64`'s
        // range is JSON too.
        match serde_json::from_str::<&serde_json::value::RawValue>(json) {
            Ok(_) => Ok(()),
            Err(error) => Err(Error::NoteDetails {
                table,
                transition,
                problem: error.to_string(),
            }),
        }
    }
}

/// What a [`Transition`](crate::Transition) holds for its history row: `()`
/// for no note, a [`Note`] once [noted](crate::Transition::noted).
/// Implemented for these two only; it cannot be implemented outside this
/// crate.
pub trait NoteSlot: sealed::Sealed + Send + Sync + 'static {
    /// The note, if any.
    #[doc(hidden)]
    fn note_slot(&self) -> Option<&Note>;

    /// The note, [`Note::NONE`] for none.
    #[doc(hidden)]
    fn into_note_slot(self) -> Note;
}

impl NoteSlot for () {
    fn note_slot(&self) -> Option<&Note> {
        None
    }

    fn into_note_slot(self) -> Note {
        Note::NONE
    }
}

impl NoteSlot for Note {
    fn note_slot(&self) -> Option<&Note> {
        Some(self)
    }

    fn into_note_slot(self) -> Note {
        self
    }
}

mod sealed {
    pub trait Sealed {}

    impl Sealed for () {}

    impl Sealed for super::Note {}
}
