"""One engine replica, in parts: the mechanism (`mechanism`), one rule module per engine family
(`rules`), the decode clock's stretches (`stretch`) and token gaps (`gaps`), the arrival guard
(`arrivals`), head-of-line bookkeeping (`head_of_line`), SGLang's future-token gate as the
scheduler drives it (`future_tokens`); `Engine` (`replica`) runs them."""

from kvsched.engine.replica import Engine

__all__ = ["Engine"]
