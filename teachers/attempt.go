package teachers

import (
	"context"
	"fmt"
	"time"

	"github.com/chainedsql/chainedsql/chat"
	"github.com/chainedsql/chainedsql/internal/textcap"
)

// attempt sends one request under the concurrency and rate limits, having taken floor bytes
// of the reply budget (0: the budget's floor), and turns its response into a reply or a fault;
// a streamed response may take limit bytes (streamLimit). A fault of an attempt refused room
// names the floor for the next (fault.floor).
func (c *Client) attempt(ctx context.Context, body []byte, est int, limit, floor int64) (chat.Reply, *fault) {
	if err := c.sem.Acquire(ctx, 1); err != nil {
		return chat.Reply{}, c.canceled(ctx, "waiting for a concurrency slot", err)
	}
	defer c.sem.Release(1)
	reserved, f := c.waitLimits(ctx, est)
	if f != nil {
		return chat.Reply{}, f
	}
	m := newMeter(replyBudget)
	defer m.release()
	if floor <= 0 {
		floor = replyBudget.floor
	}
	a, cp, f := c.send(ctx, body, m, limit, floor)
	if f != nil {
		f.floor = m.retryFloor()
		// A provider's error message is up to what a reply keeps (maxUnit): cut it now as fail
		// cuts it (redacted first), since a call waiting to retry holds its fault outside the
		// concurrency slots and the reply budget. fail cutting it again changes nothing.
		f.msg = textcap.Cut(c.redact(f.msg), textcap.Error)
		return chat.Reply{}, f
	}
	u := c.account(a, reserved)
	rep, f := c.reply(a, cp, u)
	if f != nil {
		return chat.Reply{}, f
	}
	return c.applyPolicy(rep, !a.content.nonBlank, cp)
}

// waitLimits waits for the RPM and TPM limits (reserving min(est, burst) tokens, returned) and
// for the provider's rate-limit pacing.
func (c *Client) waitLimits(ctx context.Context, est int) (int, *fault) {
	if c.rpm != nil {
		if err := c.rpm.Wait(ctx); err != nil {
			return 0, c.canceled(ctx, "waiting for the RPM limit", err)
		}
	}
	reserved := 0
	if c.tpm != nil {
		reserved = min(est, c.tpmBurst)
		if err := c.tpm.WaitN(ctx, reserved); err != nil {
			return 0, c.canceled(ctx, "waiting for the TPM limit", err)
		}
	}
	waited, err := c.pace.wait(ctx, est)
	if err != nil {
		return 0, c.canceled(ctx, "waiting for the provider's rate limit to reset", err)
	}
	if waited > 0 {
		c.mu.Lock()
		c.st.Paced++
		c.st.PacedFor += waited
		c.mu.Unlock()
	}
	return reserved, nil
}

// send makes one request with the encoded body within the endpoint's timeout, plain or
// streamed (within limit bytes), and assembles its response, what it holds of the reply budget held in m; the
// capture holds its status, headers and body. Before the request is sent m takes its floor of
// the budget, waiting for room within the timeout (ReasonReplyBudget when none came).
func (c *Client) send(ctx context.Context, body []byte, m *meter, limit, floor int64) (*assembly, *capture, *fault) {
	tctx, cancelTimeout := context.WithTimeout(ctx, c.ep.Timeout)
	defer cancelTimeout()
	cp := &capture{stream: c.ep.Stream, idle: c.ep.StreamIdleTimeout, limit: limit, meter: m}
	if err := m.admit(tctx, floor); err != nil {
		if ctx.Err() != nil {
			return nil, cp, c.canceled(ctx, "waiting for room in the reply budget", err)
		}
		return nil, cp, &fault{reason: ReasonReplyBudget, retry: true,
			msg: fmt.Sprintf("no room for the reply in the reply budget (%d MiB) within the attempt's timeout (%v)", replyBudget.limit>>20, c.ep.Timeout)}
	}
	actx, cancel := context.WithCancelCause(tctx)
	defer cancel(nil)
	cp.cancel = cancel

	c.mu.Lock()
	c.st.Requests++
	c.st.inFlight++
	if c.st.inFlight > c.st.MaxInFlight {
		c.st.MaxInFlight = c.st.inFlight
	}
	c.mu.Unlock()
	a := &assembly{limit: maxReplyText}
	err := c.exchange(actx, body, cp, a)
	c.mu.Lock()
	c.st.inFlight--
	c.mu.Unlock()
	now := time.Now()
	c.pace.observe(cp.header, now)
	if err != nil {
		f := c.classify(ctx, actx, err, cp)
		if f.reason == ReasonRateLimited && f.retryAfter > 0 {
			c.pace.block(now.Add(f.retryAfter))
		}
		return nil, cp, f
	}
	return a, cp, nil
}

// account prices the response's usage (the provider's reported cost when it has one), adds it
// to the stats and charges the TPM limiter what the reservation missed.
func (c *Client) account(a *assembly, reserved int) chat.Usage {
	u, reported := a.chatUsage()
	if reported != nil {
		u.CostUSD = *reported
	} else {
		u.CostUSD = c.price(u)
	}
	c.mu.Lock()
	c.st.Usage = c.st.Usage.Add(u)
	c.st.CostUSD += u.CostUSD
	c.mu.Unlock()
	if c.tpm != nil {
		// Charge what the estimate missed (the completion, a denser prompt) as debt on later
		// requests. x/time/rate cannot hand tokens back, so an overestimate stays spent: the
		// limiter errs on the slow side.
		if more := u.Total() - reserved; more > 0 {
			c.tpm.ReserveN(time.Now(), min(more, c.tpmBurst))
		}
	}
	return u
}

// reply is the assembled response as a chat.Reply, or the fault of a response without choices,
// a stream that ended early, or a provider's finish reason that means a fault.
func (c *Client) reply(a *assembly, cp *capture, u chat.Usage) (chat.Reply, *fault) {
	if a.choices == 0 {
		msg := "the response has no choices"
		if em := errorField(cp.body); em != "" {
			msg += "; its error: " + em // some gateways answer 200 with an error object
		}
		return chat.Reply{}, &fault{reason: ReasonEmptyChoices, status: cp.status, msg: msg, retry: true}
	}
	if c.ep.Stream && !a.finished {
		// The stream ended cleanly but before the reply did: never keep half a reply.
		return chat.Reply{}, &fault{reason: ReasonIncomplete, status: cp.status, retry: true,
			msg: fmt.Sprintf("the stream ended after %d bytes of content without a finish_reason", a.content.Len())}
	}
	rep := chat.Reply{Content: a.content.String(), FinishReason: a.finish, Usage: u, Model: a.model,
		ThinkOpened: c.ep.TemplateOpensThink && (c.ep.Thinking == nil || *c.ep.Thinking)}
	rep.Reasoning, rep.ReasoningSource = a.pickReasoning(c.prof.ReasoningOrder)
	if rule, ok := finishRules[a.finish]; ok {
		if rule.reason != "" {
			return chat.Reply{}, &fault{reason: rule.reason, status: cp.status, retry: true,
				msg: fmt.Sprintf("the provider ended the reply with finish_reason %q", a.finish)}
		}
		rep.FinishReason, rep.ProviderFinishReason = rule.norm, a.finish
	}
	if rep.Model == "" {
		rep.Model = c.ep.Model
	}
	return rep, nil
}

// policyField names the config field that decides each reply policy.
var policyField = map[string]string{ReasonEmpty: "on_empty", ReasonLength: "on_length", ReasonContentFilter: "on_content_filter"}

// applyPolicy keeps, retries or fails a reply cut by a content filter or the token limit, or
// with blank content (all of it white space, before any cut), as on_content_filter, on_length
// and on_empty say.
func (c *Client) applyPolicy(rep chat.Reply, blank bool, cp *capture) (chat.Reply, *fault) {
	var reason, policy string
	switch {
	case rep.FinishReason == chat.FinishContentFilter:
		reason, policy = ReasonContentFilter, c.ep.OnContentFilter
	case rep.FinishReason == chat.FinishLength:
		reason, policy = ReasonLength, c.ep.OnLength
	case blank:
		reason, policy = ReasonEmpty, c.ep.OnEmpty
	default:
		return rep, nil
	}
	switch policy {
	case OnKeep:
		c.mu.Lock()
		inc(&c.st.Kept, reason)
		c.mu.Unlock()
		return rep, nil
	case OnRetry:
		return chat.Reply{}, &fault{reason: reason, status: cp.status, msg: "reply rejected by " + policyField[reason] + ": retry", retry: true}
	default:
		return chat.Reply{}, &fault{reason: reason, status: cp.status, msg: "reply rejected by " + policyField[reason] + ": fail"}
	}
}
