//! [`FnTool`]: a tool from a closure (the Rust `defineTool`).

use super::traits::{LocalFuture, Tool, ToolContext, ToolError, ToolOutput};
use async_trait::async_trait;
use serde_json::Value;
use std::future::Future;
use std::rc::Rc;

type Exec = Rc<dyn Fn(Value, ToolContext) -> LocalFuture<'static, Result<ToolOutput, ToolError>>>;
type Predicate = Rc<dyn Fn(&Value) -> bool>;

/// A tool built from a name, a description, a JSON Schema and an async closure.
#[derive(Clone)]
pub struct FnTool {
    name: String,
    description: String,
    schema: Value,
    approval: Option<Predicate>,
    exec: Exec,
}

impl FnTool {
    /// A tool that runs `f(args, ctx)`.
    pub fn new<F, Fut>(name: impl Into<String>, description: impl Into<String>, schema: Value, f: F) -> FnTool
    where
        F: Fn(Value, ToolContext) -> Fut + 'static,
        Fut: Future<Output = Result<ToolOutput, ToolError>> + 'static,
    {
        FnTool {
            name: name.into(),
            description: description.into(),
            schema,
            approval: None,
            exec: Rc::new(move |args, ctx| Box::pin(f(args, ctx))),
        }
    }

    /// Every call needs approval (or none, with `false`).
    pub fn needs_approval(mut self, always: bool) -> FnTool {
        self.approval = always.then(|| Rc::new(|_: &Value| true) as Predicate);
        self
    }

    /// Calls whose arguments satisfy `pred` need approval.
    pub fn approval_when(mut self, pred: impl Fn(&Value) -> bool + 'static) -> FnTool {
        self.approval = Some(Rc::new(pred));
        self
    }
}

#[async_trait(?Send)]
impl Tool for FnTool {
    fn name(&self) -> &str {
        &self.name
    }

    fn description(&self) -> &str {
        &self.description
    }

    fn input_schema(&self) -> &Value {
        &self.schema
    }

    fn needs_approval(&self, args: &Value) -> bool {
        self.approval.as_ref().is_some_and(|p| p(args))
    }

    async fn execute(&self, args: Value, ctx: ToolContext) -> Result<ToolOutput, ToolError> {
        (self.exec)(args, ctx).await
    }
}
