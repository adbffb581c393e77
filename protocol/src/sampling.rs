//! Sampling: how a model is asked to generate (temperature, limits, tool choice).
//!
//! Set per agent type in its definition (`sampling`, or the flat keys of an agent file) and
//! per tree by the application; a model turn is given the two laid over each other, the
//! definition's fields first ([`Sampling::or`]). Every field is optional: one left unset is
//! not sent, and the provider's own default applies.
//!
//! # Invariants
//!
//! - A [`Sampling`] that [`Sampling::check`] accepts holds only finite numbers in range, so
//!   equality over it is a true equivalence (`Eq` is implemented by hand on the bits).

use std::fmt;

use serde::{Deserialize, Serialize};

/// Which tools a model may or must call in a turn.
///
/// Written as `auto`, `required` (also `any`, Anthropic's word), `none`, or the name of one
/// tool the model must call.
///
/// ```
/// use agent_tree_protocol::ToolChoice;
/// let choice: ToolChoice = serde_json::from_str(r#""required""#).unwrap();
/// assert_eq!(choice, ToolChoice::Required);
/// let named: ToolChoice = serde_json::from_str(r#""lookup""#).unwrap();
/// assert_eq!(named, ToolChoice::Tool("lookup".into()));
/// assert_eq!(serde_json::to_string(&ToolChoice::None).unwrap(), r#""none""#);
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ToolChoice {
    /// The model decides (the providers' default when tools are offered).
    Auto,
    /// The model must call at least one tool.
    Required,
    /// The model may call no tool.
    None,
    /// The model must call this tool.
    Tool(String),
}

impl ToolChoice {
    /// Reads a written tool choice: `auto`, `required` or `any`, `none` (ignoring ASCII
    /// case), else one tool's name. A blank name is `None` (not a choice).
    ///
    /// ```
    /// use agent_tree_protocol::ToolChoice;
    /// assert_eq!(ToolChoice::parse("Any"), Some(ToolChoice::Required));
    /// assert_eq!(ToolChoice::parse(" "), None);
    /// ```
    pub fn parse(text: &str) -> Option<ToolChoice> {
        let text = text.trim();
        let choice = match text.to_ascii_lowercase().as_str() {
            "" => return None,
            "auto" => ToolChoice::Auto,
            "required" | "any" => ToolChoice::Required,
            "none" => ToolChoice::None,
            _ => ToolChoice::Tool(text.to_owned()),
        };
        Some(choice)
    }

    /// The written form (`auto`, `required`, `none`, or the tool's name).
    pub fn as_str(&self) -> &str {
        match self {
            ToolChoice::Auto => "auto",
            ToolChoice::Required => "required",
            ToolChoice::None => "none",
            ToolChoice::Tool(name) => name,
        }
    }
}

impl fmt::Display for ToolChoice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Serialize for ToolChoice {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for ToolChoice {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        ToolChoice::parse(&text)
            .ok_or_else(|| serde::de::Error::custom("a tool choice may not be blank"))
    }
}

/// How a model is asked to generate: each field unset is not sent.
///
/// ```
/// use agent_tree_protocol::{Sampling, ToolChoice};
/// let agent = Sampling::default().with_temperature(0.2).with_tool_choice(ToolChoice::Required);
/// let tree = Sampling::default().with_temperature(0.7).with_max_output_tokens(1024);
/// let sent = agent.or(&tree);
/// assert_eq!(sent.temperature, Some(0.2));
/// assert_eq!(sent.max_output_tokens, Some(1024));
/// assert!(sent.check().is_ok());
///
/// let json: Sampling = serde_json::from_str(r#"{"seed": 7, "stop": ["END"]}"#).unwrap();
/// assert_eq!(json.seed, Some(7));
/// ```
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
#[non_exhaustive]
pub struct Sampling {
    /// Randomness, 0 to 2 (Anthropic accepts 0 to 1).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub temperature: Option<f64>,
    /// Nucleus sampling, above 0 and at most 1.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub top_p: Option<f64>,
    /// A seed for servers that sample reproducibly (OpenAI-compatible ones; Anthropic has
    /// none and does not send it).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub seed: Option<u64>,
    /// Texts that end the output where they appear.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub stop: Vec<String>,
    /// The most tokens one turn may generate.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_output_tokens: Option<u32>,
    /// Which tools the model may or must call.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tool_choice: Option<ToolChoice>,
    /// Whether the model may call several tools in one turn.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub parallel_tool_calls: Option<bool>,
}

/// A sampling field out of its range.
///
/// ```
/// use agent_tree_protocol::Sampling;
/// let err = Sampling::default().with_temperature(3.0).check().unwrap_err();
/// assert_eq!(err.to_string(), "field `temperature`: 3 is not within 0 to 2");
/// ```
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("field `{field}`: {problem}")]
pub struct SamplingError {
    /// The field's name.
    pub field: &'static str,
    /// What is wrong with it.
    pub problem: String,
}

impl Sampling {
    /// The same with `temperature`.
    pub fn with_temperature(mut self, temperature: f64) -> Self {
        self.temperature = Some(temperature);
        self
    }

    /// The same with `top_p`.
    pub fn with_top_p(mut self, top_p: f64) -> Self {
        self.top_p = Some(top_p);
        self
    }

    /// The same with `seed`.
    pub fn with_seed(mut self, seed: u64) -> Self {
        self.seed = Some(seed);
        self
    }

    /// The same with these stop sequences.
    pub fn with_stop<I, S>(mut self, stop: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.stop = stop.into_iter().map(Into::into).collect();
        self
    }

    /// The same with an output limit.
    pub fn with_max_output_tokens(mut self, max: u32) -> Self {
        self.max_output_tokens = Some(max);
        self
    }

    /// The same with a tool choice.
    pub fn with_tool_choice(mut self, choice: ToolChoice) -> Self {
        self.tool_choice = Some(choice);
        self
    }

    /// The same with parallel tool calls allowed or not.
    pub fn with_parallel_tool_calls(mut self, on: bool) -> Self {
        self.parallel_tool_calls = Some(on);
        self
    }

    /// Each field of `self`, else `fallback`'s (stop sequences: `self`'s if it has any).
    ///
    /// ```
    /// use agent_tree_protocol::Sampling;
    /// let merged = Sampling::default().with_seed(1).or(&Sampling::default().with_seed(2).with_top_p(0.9));
    /// assert_eq!((merged.seed, merged.top_p), (Some(1), Some(0.9)));
    /// ```
    #[must_use]
    pub fn or(&self, fallback: &Sampling) -> Sampling {
        Sampling {
            temperature: self.temperature.or(fallback.temperature),
            top_p: self.top_p.or(fallback.top_p),
            seed: self.seed.or(fallback.seed),
            stop: if self.stop.is_empty() {
                fallback.stop.clone()
            } else {
                self.stop.clone()
            },
            max_output_tokens: self.max_output_tokens.or(fallback.max_output_tokens),
            tool_choice: self.tool_choice.clone().or(fallback.tool_choice.clone()),
            parallel_tool_calls: self.parallel_tool_calls.or(fallback.parallel_tool_calls),
        }
    }

    /// Whether no field is set.
    ///
    /// ```
    /// use agent_tree_protocol::Sampling;
    /// assert!(Sampling::default().is_unset());
    /// assert!(!Sampling::default().with_seed(3).is_unset());
    /// ```
    pub fn is_unset(&self) -> bool {
        self == &Sampling::default()
    }

    /// Checks every field's range.
    ///
    /// # Errors
    ///
    /// The first field out of range: a temperature outside 0 to 2, a `top_p` outside (0, 1],
    /// a number that is not finite, an output limit of 0, a blank stop sequence.
    pub fn check(&self) -> Result<(), SamplingError> {
        fn range(
            field: &'static str,
            value: Option<f64>,
            ok: impl Fn(f64) -> bool,
            what: &str,
        ) -> Result<(), SamplingError> {
            match value {
                Some(v) if !v.is_finite() || !ok(v) => Err(SamplingError {
                    field,
                    problem: format!("{v} is not within {what}"),
                }),
                _ => Ok(()),
            }
        }
        range(
            "temperature",
            self.temperature,
            |v| (0.0..=2.0).contains(&v),
            "0 to 2",
        )?;
        range(
            "top_p",
            self.top_p,
            |v| v > 0.0 && v <= 1.0,
            "0 (exclusive) to 1",
        )?;
        if self.max_output_tokens == Some(0) {
            return Err(SamplingError {
                field: "max_output_tokens",
                problem: "0 tokens leaves no room for an answer".into(),
            });
        }
        if self.stop.iter().any(|s| s.is_empty()) {
            return Err(SamplingError {
                field: "stop",
                problem: "a stop sequence may not be empty".into(),
            });
        }
        Ok(())
    }
}

impl PartialEq for Sampling {
    fn eq(&self, other: &Self) -> bool {
        let bits = |v: Option<f64>| v.map(f64::to_bits);
        bits(self.temperature) == bits(other.temperature)
            && bits(self.top_p) == bits(other.top_p)
            && self.seed == other.seed
            && self.stop == other.stop
            && self.max_output_tokens == other.max_output_tokens
            && self.tool_choice == other.tool_choice
            && self.parallel_tool_calls == other.parallel_tool_calls
    }
}

/// Equality compares the numbers' bits, so it is reflexive (NaN equals itself).
impl Eq for Sampling {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn equality_is_reflexive_even_for_nan() {
        let nan = Sampling::default().with_temperature(f64::NAN);
        assert_eq!(nan, nan.clone());
        assert!(nan.check().is_err());
    }

    #[test]
    fn ranges_are_checked_per_field() {
        assert!(Sampling::default().with_top_p(0.0).check().is_err());
        assert!(Sampling::default().with_top_p(1.0).check().is_ok());
        assert!(Sampling::default().with_temperature(-0.1).check().is_err());
        assert_eq!(
            Sampling::default()
                .with_max_output_tokens(0)
                .check()
                .unwrap_err()
                .field,
            "max_output_tokens"
        );
        assert_eq!(
            Sampling::default()
                .with_stop([""])
                .check()
                .unwrap_err()
                .field,
            "stop"
        );
    }

    #[test]
    fn unknown_fields_are_refused() {
        let err = serde_json::from_str::<Sampling>(r#"{"temprature": 1}"#).unwrap_err();
        assert!(err.to_string().contains("temprature"), "{err}");
    }

    #[test]
    fn a_named_tool_keeps_its_case() {
        assert_eq!(
            ToolChoice::parse("Lookup"),
            Some(ToolChoice::Tool("Lookup".into()))
        );
        assert_eq!(ToolChoice::parse("NONE"), Some(ToolChoice::None));
    }
}
