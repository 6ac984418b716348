package generate

// loop is the scheduler until Close: while idle it waits for a request; then it receives the
// submitted ones, admits what fits, drops the cancelled and runs a step.
func (g *Generator) loop() {
	defer close(g.done)
	defer g.shutdown()
	for {
		if len(g.active) == 0 && len(g.waiting) == 0 {
			select {
			case s := <-g.submit:
				g.waiting = append(g.waiting, s)
			case <-g.ctx.Done():
				return
			}
		}
		g.receive()
		if g.ctx.Err() != nil {
			return
		}
		g.admit()
		g.dropCancelled()
		g.updateQueueStats()
		if len(g.active) == 0 {
			continue
		}
		g.step()
	}
}

// receive moves the requests submitted so far to the waiting queue, without blocking.
func (g *Generator) receive() {
	for {
		select {
		case s := <-g.submit:
			g.waiting = append(g.waiting, s)
		default:
			return
		}
	}
}

// shutdown ends every request with ErrClosed and releases all caches.
func (g *Generator) shutdown() {
	g.receive()
	for _, s := range append(g.waiting, g.active...) {
		if s.cache != nil {
			s.cache.Release()
			s.cache = nil
		}
		s.end("", -1, ErrClosed)
	}
	g.waiting, g.active = nil, nil
	g.updateQueueStats()
	for _, n := range g.tree.kept {
		n.cache.Release()
	}
	g.tree = prefixTree{}
	g.updatePoolStats()
}

// admit moves waiting requests into the active set while there is room, in order; a request
// that waits for a running one to compute their common prefix stays behind without holding up
// those after it.
func (g *Generator) admit() {
	keep := g.waiting[:0]
	for _, s := range g.waiting {
		if err := s.ctx.Err(); err != nil {
			s.end("", -1, err)
			continue
		}
		if len(g.active) >= g.cfg.MaxBatch {
			keep = append(keep, s)
			continue
		}
		ready, err := g.attach(s)
		if err != nil {
			s.end("", -1, err)
			continue
		}
		if !ready {
			keep = append(keep, s)
			continue
		}
		g.active = append(g.active, s)
		g.statsMu.Lock()
		g.stats.Requests++
		g.stats.PromptTokens += int64(len(s.req.Prompt))
		g.stats.CachedTokens += int64(s.cached)
		g.statsMu.Unlock()
	}
	clear(g.waiting[len(keep):])
	g.waiting = keep
	g.updatePoolStats()
}

// dropCancelled ends the active requests whose context is done, keeping their caches.
func (g *Generator) dropCancelled() {
	keep := g.active[:0]
	for _, s := range g.active {
		if err := s.ctx.Err(); err != nil {
			g.keep(s)
			s.end("", -1, err)
			continue
		}
		keep = append(keep, s)
	}
	clear(g.active[len(keep):])
	g.active = keep
}

// fail ends the active request s with err, releasing its cache.
func (g *Generator) fail(s *Sequence, err error) {
	s.cache.Release()
	s.cache = nil
	g.updatePoolStats()
	s.end("", -1, err)
}

// removeEnded drops ended sequences from the active set.
func (g *Generator) removeEnded() {
	keep := g.active[:0]
	for _, s := range g.active {
		select {
		case <-s.doneCh:
			continue
		default:
		}
		keep = append(keep, s)
	}
	clear(g.active[len(keep):])
	g.active = keep
	g.updateQueueStats()
}
