package promread

import (
	"context"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"io"
	"net/http"
	"slices"
	"strconv"

	"github.com/golang/snappy"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/prompb"
	"github.com/prometheus/prometheus/storage"
	"github.com/prometheus/prometheus/tsdb/chunks"
)

// maxReadRequestBytes bounds a remote-read request body (compressed and
// decompressed): a request is a handful of matchers, never megabytes.
const maxReadRequestBytes = 8 << 20

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// remoteRead serves POST /api/v1/read.
func (api *API) remoteRead(w http.ResponseWriter, r *http.Request) {
	ctx, release, err := api.admit(r.Context())
	if err != nil {
		api.readError(w, err)
		return
	}
	defer release()
	req, err := decodeReadRequest(r)
	if err != nil {
		api.readError(w, err)
		return
	}
	queries := make([]selectParams, len(req.Queries))
	for i, q := range req.Queries {
		ms, err := fromLabelMatchers(q.Matchers)
		if err != nil {
			api.readError(w, err)
			return
		}
		// Hints are advisory: the answer is the raw data of the range.
		queries[i] = selectParams{mint: q.StartTimestampMs, maxt: q.EndTimestampMs, matchers: ms}
	}
	if negotiate(req.AcceptedResponseTypes) == prompb.ReadRequest_STREAMED_XOR_CHUNKS {
		api.streamRead(ctx, w, queries)
		return
	}
	api.sampledRead(ctx, w, queries)
}

func decodeReadRequest(r *http.Request) (*prompb.ReadRequest, error) {
	compressed, err := io.ReadAll(io.LimitReader(r.Body, maxReadRequestBytes+1))
	if err != nil {
		return nil, badRequest("read body: %v", err)
	}
	if len(compressed) > maxReadRequestBytes {
		return nil, badRequest("request body exceeds %d bytes", maxReadRequestBytes)
	}
	if n, err := snappy.DecodedLen(compressed); err != nil || n > maxReadRequestBytes {
		return nil, badRequest("body is not snappy-compressed or too large (%v)", err)
	}
	raw, err := snappy.Decode(nil, compressed)
	if err != nil {
		return nil, badRequest("snappy: %v", err)
	}
	var req prompb.ReadRequest
	if err := req.Unmarshal(raw); err != nil {
		return nil, badRequest("ReadRequest: %v", err)
	}
	return &req, nil
}

// negotiate takes the first response type the client accepts that is
// implemented; none (or only unknown ones) means SAMPLES.
func negotiate(accepted []prompb.ReadRequest_ResponseType) prompb.ReadRequest_ResponseType {
	for _, t := range accepted {
		switch t {
		case prompb.ReadRequest_SAMPLES, prompb.ReadRequest_STREAMED_XOR_CHUNKS:
			return t
		}
	}
	return prompb.ReadRequest_SAMPLES
}

func fromLabelMatchers(pms []*prompb.LabelMatcher) ([]*labels.Matcher, error) {
	out := make([]*labels.Matcher, 0, len(pms))
	for _, pm := range pms {
		var t labels.MatchType
		switch pm.Type {
		case prompb.LabelMatcher_EQ:
			t = labels.MatchEqual
		case prompb.LabelMatcher_NEQ:
			t = labels.MatchNotEqual
		case prompb.LabelMatcher_RE:
			t = labels.MatchRegexp
		case prompb.LabelMatcher_NRE:
			t = labels.MatchNotRegexp
		default:
			return nil, badRequest("unknown matcher type %d", pm.Type)
		}
		m, err := labels.NewMatcher(t, pm.Name, pm.Value)
		if err != nil {
			return nil, badRequest("matcher %s: %v", pm.Name, err)
		}
		out = append(out, m)
	}
	return out, nil
}

// readError answers a remote-read failure with a one-line text body.
func (api *API) readError(w http.ResponseWriter, err error) {
	_, status := classify(err)
	http.Error(w, err.Error(), status)
}

// sampledRead answers in SAMPLES mode: the whole response is built in
// memory, so every query of the request shares one sample budget. The
// floats are decoded, encoded and compressed run by run, on several
// goroutines for a large answer (see samplesAnswer); what is held is the
// compressed answer and one run's buffers per goroutine.
func (api *API) sampledRead(ctx context.Context, w http.ResponseWriter, queries []selectParams) {
	b := api.s.newBudget()
	defer b.release() // the answer is written by then
	ans := samplesAnswer{sels: make([]*selection, len(queries))}
	for i, q := range queries {
		q.budget = b
		sel, err := api.s.selectPieces(ctx, q)
		if err != nil {
			api.readError(w, err)
			return
		}
		ans.sels[i] = sel
	}
	ans.encoders = api.getEncoders(max(1, api.s.par.workers))
	defer api.putEncoders(ans.encoders)
	if err := ans.encode(ctx, api.s.par); err != nil {
		api.readError(w, err)
		return
	}
	hdr, lits, err := ans.header()
	if err != nil {
		api.readError(w, err)
		return
	}
	w.Header().Set("Content-Type", "application/x-protobuf")
	w.Header().Set("Content-Encoding", "snappy")
	w.Header().Set("Content-Length", strconv.Itoa(ans.compressedLen(hdr, lits)))
	w.WriteHeader(http.StatusOK)
	ans.writeTo(w, hdr, lits) // a failed write is the client's going away
}

// An encoder is kept for reuse only while its buffers are at most
// maxPooledRaw (one run's protobuf: ~150 KiB, more only for a single huge
// series), maxPooledArena (its share of a compressed answer: a few MiB
// for a whole metric) and maxPooledFloats samples; a rare huge answer's
// memory goes back to the runtime. At most maxIdleEncoders are kept, so
// idle memory is at most maxIdleEncoders * (4 + 8 + 4 + 0.3) MiB, about
// 65 MiB (a prompb.Histogram is 272 bytes; the pooled ones are cleared,
// so they hold no spans or buckets).
const (
	maxPooledRaw    = 4 << 20
	maxPooledArena  = 8 << 20
	maxPooledFloats = 1 << 18 // 4 MiB
	maxPooledHists  = 1 << 10
	maxIdleEncoders = 4
)

// getEncoders takes n encoders from the free list, making what is missing.
func (api *API) getEncoders(n int) []*runEncoder {
	out := make([]*runEncoder, n)
	for i := range out {
		select {
		case e := <-api.encoders:
			out[i] = e
		default:
			out[i] = &runEncoder{}
		}
	}
	return out
}

// putEncoders returns encoders to the free list, unless they grew past
// the limits above or the list is full.
func (api *API) putEncoders(es []*runEncoder) {
	for _, e := range es {
		e.resetArena() // the chunks past the first, for the collector
		if cap(e.raw) > maxPooledRaw || e.arenaBytes() > maxPooledArena ||
			cap(e.floats) > maxPooledFloats || cap(e.hists) > maxPooledHists {
			continue
		}
		clear(e.hists[:cap(e.hists)]) // let go of the last answer's spans and buckets
		select {
		case api.encoders <- e:
		default: // enough idle encoders kept
		}
	}
}

// streamRead answers in STREAMED_XOR_CHUNKS mode. Memory stays bounded by
// one metric's answer, not the request's: a query whose __name__ matchers
// allow several metrics is answered metric by metric (in name order, each
// in its own snapshot and under its own sample budget), each series
// encoded into chunks and written before the next. Series come sorted by
// labels as long as no label name sorts before "__name__" (names starting
// with an upper-case letter).
func (api *API) streamRead(ctx context.Context, w http.ResponseWriter, queries []selectParams) {
	fw := &frameWriter{w: w, max: api.opts.MaxBytesInFrame}
	if f, ok := w.(http.Flusher); ok {
		fw.flusher = f
	}
	started := false
	fail := func(err error) {
		if !started {
			api.readError(w, err)
			return
		}
		// The status is sent. Prometheus does the same: the text corrupts
		// the next frame, so the client fails instead of taking a short
		// stream for a whole one.
		api.opts.Logger.Warn("remote-read failed mid-stream", "err", err)
		io.WriteString(w, "\n"+err.Error())
	}
	for qi, q := range queries {
		batches, err := api.batches(ctx, q)
		if err != nil {
			fail(err)
			return
		}
		for _, bq := range batches {
			bq.budget = api.s.newBudget()
			got, err := api.s.selectSeries(ctx, bq)
			if err != nil {
				bq.budget.release()
				fail(err)
				return
			}
			if !started {
				w.Header().Set("Content-Type", "application/x-streamed-protobuf; proto=prometheus.ChunkedReadResponse")
				w.WriteHeader(http.StatusOK)
				started = true
			}
			for i, sr := range got {
				if err := fw.writeSeries(int64(qi), sr); err != nil {
					bq.budget.release()
					fail(err)
					return
				}
				got[i] = nil // let the series go as soon as it is sent
			}
			bq.budget.release() // this batch is sent
		}
	}
	if !started {
		w.Header().Set("Content-Type", "application/x-streamed-protobuf; proto=prometheus.ChunkedReadResponse")
		w.WriteHeader(http.StatusOK)
	}
}

// batches splits a query into one query per metric name when its __name__
// matchers allow more than one.
func (api *API) batches(ctx context.Context, q selectParams) ([]selectParams, error) {
	nc := constrainNames(q.matchers)
	names := nc.names
	if nc.all {
		var err error
		if names, err = api.s.labelValues(ctx, q.mint, q.maxt, labels.MetricName, nc.ms); err != nil {
			return nil, err
		}
	}
	if len(names) <= 1 {
		return []selectParams{q}, nil
	}
	names = slices.Clone(names)
	slices.Sort(names)
	out := make([]selectParams, len(names))
	for i, n := range names {
		b := q
		b.matchers = append(slices.Clip(q.matchers), labels.MustNewMatcher(labels.MatchEqual, labels.MetricName, n))
		out[i] = b
	}
	return out, nil
}

// frameWriter writes the streamed remote-read framing: uvarint(len(data)),
// big-endian CRC32-Castagnoli of data, data (a ChunkedReadResponse).
type frameWriter struct {
	w       io.Writer
	flusher http.Flusher
	max     int
	hdr     [binary.MaxVarintLen64 + 4]byte
	buf     []byte
	chks    []prompb.Chunk
	iter    chunks.Iterator
}

func (fw *frameWriter) frame(data []byte) error {
	n := binary.PutUvarint(fw.hdr[:], uint64(len(data)))
	binary.BigEndian.PutUint32(fw.hdr[n:], crc32.Checksum(data, castagnoli))
	if _, err := fw.w.Write(fw.hdr[:n+4]); err != nil {
		return err
	}
	if _, err := fw.w.Write(data); err != nil {
		return err
	}
	if fw.flusher != nil {
		fw.flusher.Flush()
	}
	return nil
}

// writeSeries writes one series as one or more frames, each at most
// fw.max bytes (a single chunk is far smaller than any sane limit).
func (fw *frameWriter) writeSeries(queryIndex int64, sr *series) error {
	lbls := prompb.FromLabels(sr.lbls, nil)
	cs := storage.NewSeriesToChunkEncoder(&seriesView{sr: sr})
	fw.iter = cs.Iterator(fw.iter)
	fw.chks = fw.chks[:0]
	resp := prompb.ChunkedReadResponse{QueryIndex: queryIndex, ChunkedSeries: []*prompb.ChunkedSeries{{Labels: lbls}}}
	base := resp.Size() + 16 // labels, query index, the field's own framing
	size := base
	flush := func() error {
		resp.ChunkedSeries[0].Chunks = fw.chks
		n := resp.Size()
		if cap(fw.buf) < n {
			fw.buf = make([]byte, n)
		}
		m, err := resp.MarshalToSizedBuffer(fw.buf[:n])
		if err != nil {
			return err
		}
		if err := fw.frame(fw.buf[n-m : n]); err != nil {
			return err
		}
		fw.chks, size = fw.chks[:0], base
		return nil
	}
	for fw.iter.Next() {
		meta := fw.iter.At()
		c := prompb.Chunk{MinTimeMs: meta.MinTime, MaxTimeMs: meta.MaxTime,
			Type: prompb.Chunk_Encoding(meta.Chunk.Encoding()), Data: meta.Chunk.Bytes()}
		cost := c.Size() + 8
		if len(fw.chks) > 0 && size+cost > fw.max {
			if err := flush(); err != nil {
				return err
			}
		}
		if base+cost > fw.max {
			return fmt.Errorf("a chunk of %d bytes does not fit a %d-byte frame", cost, fw.max)
		}
		fw.chks = append(fw.chks, c)
		size += cost
	}
	if err := fw.iter.Err(); err != nil {
		return err
	}
	if len(fw.chks) > 0 {
		return flush()
	}
	return nil
}
