//! Handler shapes that must not trip the generated code: arguments named like the generated
//! locals (`ctx`, `message`, `reply`), pattern arguments, `Self` in types, raw identifiers,
//! handlers and hooks switched off by `#[cfg]`, `#[cfg_attr]` on a handler, and private
//! handlers.

use actors::prelude::*;
use actors::Context;

#[actor]
#[derive(Clone, Debug, PartialEq)]
struct Shapes {
    value: u8,
}

#[actor]
impl Shapes {
    fn named_like_locals(&self, ctx: u8, message: u8, reply: u8) -> u8 {
        ctx + message + reply
    }

    fn context_and_ctx(&self, context: &mut Context<Self>, ctx: u8) -> (u8, &'static str) {
        (ctx, context.label())
    }

    fn pattern(&self, (a, b): (u8, u8), _: u8) -> u8 {
        a + b
    }

    fn same(&self, other: Self) -> Self {
        Shapes {
            value: self.value + other.value,
        }
    }

    fn r#type(&self) -> u8 {
        self.value
    }

    #[cfg(any())]
    fn switched_off(&self, value: std::rc::Rc<u8>) -> u8 {
        *value
    }

    #[cfg(any())]
    fn on_stop(&mut self) {
        unreachable!("compiled out");
    }

    #[cfg_attr(all(), inline)]
    fn inlined(&self) -> u8 {
        self.value
    }

    fn private(&mut self) {
        self.value += 1;
    }
}

fn main() {
    runtime::Runner::new(runtime::Config::default()).start(|context| async move {
        let shapes = Shapes { value: 1 }.spawn(&context);
        assert_eq!(shapes.named_like_locals(1, 2, 3).await, Ok(6));
        assert_eq!(shapes.context_and_ctx(4).await, Ok((4, "shapes")));
        assert_eq!(shapes.pattern((1, 2), 9).await, Ok(3));
        assert_eq!(shapes.same(Shapes { value: 2 }).await, Ok(Shapes { value: 3 }));
        assert_eq!(shapes.r#type().await, Ok(1));
        shapes.tell_type().await.unwrap();
        shapes.try_private().unwrap();
        shapes.private().await.unwrap();
        assert_eq!(shapes.r#type().await, Ok(3));
        assert_eq!(shapes.inlined().await, Ok(3));
    });
}
