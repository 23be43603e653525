//! [`FnTool`]: a tool from a closure (the Rust `defineTool`).

use super::traits::{LocalFuture, Tool, ToolContext, ToolError, ToolOutput};
use async_trait::async_trait;
use serde_json::Value;
use std::future::Future;
use std::rc::Rc;

type Exec = Rc<dyn Fn(Value, ToolContext) -> LocalFuture<'static, Result<ToolOutput, ToolError>>>;
type Reconcile = Rc<dyn Fn(Value, String) -> LocalFuture<'static, Result<Option<ToolOutput>, ToolError>>>;
type Predicate = Rc<dyn Fn(&Value) -> bool>;

/// A tool built from a name, a description, a JSON Schema and an async closure.
#[derive(Clone)]
pub struct FnTool {
    name: String,
    description: String,
    schema: Value,
    approval: Option<Predicate>,
    exec: Exec,
    side_effecting: bool,
    reconcile: Option<Reconcile>,
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
            side_effecting: false,
            reconcile: None,
        }
    }

    /// Marks the tool side-effecting: its intent is recorded before each call (effect ledger).
    pub fn side_effecting(mut self) -> FnTool {
        self.side_effecting = true;
        self
    }

    /// Marks the tool side-effecting with a reconcile function `f(args, key)`: after a crash between the effect
    /// and its record, it says whether the effect happened (`Some(output)`) or not. `key` is the call's
    /// [`crate::runtime::ToolContext::idempotency_key`] when it ran (see [`Tool::reconcile`]).
    pub fn reconcile_with<F, Fut>(mut self, f: F) -> FnTool
    where
        F: Fn(Value, String) -> Fut + 'static,
        Fut: Future<Output = Result<Option<ToolOutput>, ToolError>> + 'static,
    {
        self.side_effecting = true;
        self.reconcile = Some(Rc::new(move |args, key| Box::pin(f(args, key))));
        self
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

    fn side_effecting(&self) -> bool {
        self.side_effecting
    }

    async fn reconcile(&self, args: &Value, key: &str) -> Result<Option<ToolOutput>, ToolError> {
        match &self.reconcile {
            Some(f) => f(args.clone(), key.to_string()).await,
            None => Ok(None),
        }
    }
}
