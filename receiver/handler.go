package receiver

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"mime"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/golang/snappy"
	"golang.org/x/time/rate"

	"github.com/dendro-receiver/dendro-receiver/encoders/promsample"
	"github.com/dendro-receiver/dendro-receiver/seriesindex"
)

// Sink commits the data of one request. Write returns nil only once
// everything passed is durable; the Handler answers 2xx only then. Series
// name their labels in the Handler's series index (Options.Series, which
// the Sink shares). It must not keep series, or the Samples slices of its
// elements, after it returns: the Handler reuses that memory for later
// requests (histograms, exemplars and metadata it may keep). Errors should
// wrap ErrRejected (permanent: 400), ErrUnavailable (503, retry) or
// ErrDiskFull (507, retry); anything else is answered 500 (see Status).
// written reports what was committed and is echoed in the 2.0 response
// headers.
type Sink interface {
	Write(ctx context.Context, source string, series []Series, meta []promsample.Metadata) (written Counts, err error)
}

// Handler serves POST /api/v1/write (any path: mount it where wanted). It is
// safe for concurrent use.
type Handler struct {
	sink Sink
	opts Options
	dec  *Decoder
	m    *metrics

	bodies sync.Pool // *[]byte compressed request bodies, borrowed per request

	// Rate limits for the Warn/Error line about refusals (every refusal is
	// logged at Debug, and counted in the metrics).
	warn4xx, warn5xx rate.Sometimes
}

// Response headers of Remote-Write 2.0, mandatory on every answer to a
// request whose content type negotiated 2.0.
const (
	HeaderSamplesWritten    = "X-Prometheus-Remote-Write-Samples-Written"
	HeaderHistogramsWritten = "X-Prometheus-Remote-Write-Histograms-Written"
	HeaderExemplarsWritten  = "X-Prometheus-Remote-Write-Exemplars-Written"
)

const (
	contentTypeV1 = "application/x-protobuf"
	contentTypeV2 = "application/x-protobuf;proto=io.prometheus.write.v2.Request"
)

// logEvery is the interval of the rate-limited refusal log lines.
const logEvery = 10 * time.Second

// initialBodyCap is the first capacity of a body buffer whose size the
// request does not announce (chunked).
const initialBodyCap = 64 << 10

// NewHandler returns a Handler writing to sink. Its metrics are registered
// on o.Registerer (an error if they already are).
func NewHandler(sink Sink, o Options) (*Handler, error) {
	if sink == nil {
		return nil, errors.New("receiver: nil Sink")
	}
	o, err := o.withDefaults()
	if err != nil {
		return nil, err
	}
	if o.Series == nil {
		// A Sink that writes through a series index (the Ingester) is
		// the one the Handler must resolve labels with.
		if si, ok := sink.(interface{ Series() *seriesindex.Index }); ok {
			o.Series = si.Series()
		}
	}
	m, err := newMetrics(o.Registerer)
	if err != nil {
		return nil, fmt.Errorf("receiver: registering metrics: %w", err)
	}
	return &Handler{
		sink:    sink,
		opts:    o,
		dec:     newDecoder(o),
		m:       m,
		warn4xx: rate.Sometimes{Interval: logEvery},
		warn5xx: rate.Sometimes{Interval: logEvery},
	}, nil
}

// outcome is what serve decided, for respond.
type outcome struct {
	proto   Protocol // 0 until the content type negotiated
	source  string
	counts  Counts // of the decoded request
	written Counts // as reported by the Sink
	err     error
}

func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	o := h.serve(r)
	h.respond(w, r, &o, start)
}

func (h *Handler) serve(r *http.Request) (o outcome) {
	if r.Method != http.MethodPost {
		o.err = fmt.Errorf("%w: %s", ErrMethodNotAllowed, r.Method)
		return o
	}
	if o.proto, o.err = negotiate(r.Header); o.err != nil {
		return o
	}
	if o.source, o.err = h.source(r.Header); o.err != nil {
		return o
	}
	bp, err := h.readBody(r)
	if bp != nil {
		defer h.putBody(bp)
	}
	if err != nil {
		o.err = err
		return o
	}
	body := *bp
	ctx, tok := h.opts.Pending.begin(r.Context())
	defer tok.end()
	req, err := h.dec.Decode(o.proto, body)
	if err != nil {
		o.err = err
		return o
	}
	// The Sink is done with the request once Write returns (see Sink).
	defer h.dec.Recycle(req)
	h.m.sizeBytes.WithLabelValues("compressed").Observe(float64(len(body)))
	if n, err := snappy.DecodedLen(body); err == nil {
		h.m.sizeBytes.WithLabelValues("decoded").Observe(float64(n))
	}
	o.counts = req.Counts
	if len(req.Series) == 0 && len(req.Metadata) == 0 {
		return o // nothing to commit: a valid, empty request
	}
	h.m.addCounts(h.m.received, req.Counts)

	o.written, err = h.sink.Write(ctx, o.source, req.Series, req.Metadata)
	switch {
	case err != nil:
		o.err = err
	case o.written != req.Counts:
		o.err = fmt.Errorf("%w: wrote %+v of %+v", ErrIncompleteWrite, o.written, req.Counts)
	}
	if o.err != nil {
		h.m.addCounts(h.m.rejected, req.Counts, classify(o.err).reason)
		return o
	}
	h.m.addCounts(h.m.written, o.written)
	return o
}

func (h *Handler) respond(w http.ResponseWriter, r *http.Request, o *outcome, start time.Time) {
	c := classify(o.err)
	hd := w.Header()
	if o.proto == ProtocolV2 {
		hd.Set(HeaderSamplesWritten, strconv.Itoa(o.written.Samples))
		hd.Set(HeaderHistogramsWritten, strconv.Itoa(o.written.Histograms))
		hd.Set(HeaderExemplarsWritten, strconv.Itoa(o.written.Exemplars))
	}
	if c.code == http.StatusMethodNotAllowed {
		hd.Set("Allow", http.MethodPost)
	}
	if c.retryable {
		hd.Set("Retry-After", strconv.Itoa(int(math.Ceil(h.opts.RetryAfter.Seconds()))))
	}
	if o.err == nil {
		w.WriteHeader(c.code)
	} else {
		http.Error(w, oneLine(o.err.Error()), c.code)
	}

	proto := "unknown"
	switch o.proto {
	case ProtocolV1:
		proto = "v1"
	case ProtocolV2:
		proto = "v2"
	}
	h.m.requests.WithLabelValues(proto, strconv.Itoa(c.code)).Inc()
	h.m.duration.WithLabelValues(proto).Observe(time.Since(start).Seconds())
	if o.err == nil {
		return
	}
	h.m.refused.WithLabelValues(c.reason).Inc()

	attrs := []any{
		slog.Int("code", c.code), slog.String("reason", c.reason), slog.String("err", o.err.Error()),
		slog.String("protocol", proto), slog.String("source", o.source), slog.String("remote", r.RemoteAddr),
		slog.String("user_agent", r.UserAgent()),
	}
	const msg = "remote-write request refused"
	h.opts.Logger.Debug(msg, attrs...)
	if c.code >= 500 {
		h.warn5xx.Do(func() { h.opts.Logger.Error(msg+" (further ones for 10s at debug level)", attrs...) })
	} else {
		h.warn4xx.Do(func() { h.opts.Logger.Warn(msg+" (further ones for 10s at debug level)", attrs...) })
	}
}

// oneLine makes err text a single bounded line for a response body.
func oneLine(s string) string {
	const max = 1024
	s = strings.NewReplacer("\r", " ", "\n", "; ").Replace(s)
	if len(s) > max {
		s = s[:max] + "..."
	}
	return s
}

// negotiate picks the protocol from Content-Type (spec: the receiver MUST)
// and checks Content-Encoding. It parses with mime.ParseMediaType, not
// client_golang's ParseProtoMsg, which splits on ";" and "=" without
// trimming: "application/x-protobuf; proto=io.prometheus.write.v2.Request"
// would silently become 1.0 there.
func negotiate(hd http.Header) (Protocol, error) {
	var p Protocol
	cts := hd.Values("Content-Type")
	switch {
	case len(cts) == 0:
		return 0, fmt.Errorf("%w: no Content-Type (want %s)", ErrUnsupportedMediaType, contentTypeV1)
	case len(cts) > 1:
		return 0, fmt.Errorf("%w: %d Content-Type headers", ErrUnsupportedMediaType, len(cts))
	case cts[0] == contentTypeV1: // fast paths for what Prometheus sends
		p = ProtocolV1
	case cts[0] == contentTypeV2:
		p = ProtocolV2
	default:
		mt, params, err := mime.ParseMediaType(cts[0])
		if err != nil || mt != contentTypeV1 {
			return 0, fmt.Errorf("%w: Content-Type %q (want %s)", ErrUnsupportedMediaType, clip(cts[0]), contentTypeV1)
		}
		switch proto, ok := params["proto"]; {
		case !ok || proto == ProtocolV1.String():
			p = ProtocolV1
		case proto == ProtocolV2.String():
			p = ProtocolV2
		default:
			return 0, fmt.Errorf("%w: proto=%q (want %s or %s)", ErrUnsupportedMediaType, clip(proto), ProtocolV1, ProtocolV2)
		}
	}
	// Both specs say senders MUST send "Content-Encoding: snappy". Absent,
	// the body is decoded as snappy anyway, as Prometheus's receiver does
	// (client_golang SnappyDecodeMiddleware): the content type is what
	// negotiates the protocol, and a body that is not snappy fails with 400.
	switch encs := hd.Values("Content-Encoding"); {
	case len(encs) == 0:
	case len(encs) == 1 && strings.EqualFold(strings.TrimSpace(encs[0]), "snappy"):
	default:
		return 0, fmt.Errorf("%w: Content-Encoding %q (want snappy)", ErrUnsupportedMediaType, clip(strings.Join(encs, ", ")))
	}
	return p, nil
}

// source returns the request's source name: the value of the source header
// (default X-Scope-OrgID), or DefaultSource without one. A present header
// must hold one value of 1..MaxSourceBytes printable ASCII characters, no
// space.
func (h *Handler) source(hd http.Header) (string, error) {
	vs := hd.Values(h.opts.SourceHeader)
	switch {
	case len(vs) == 0:
		return DefaultSource, nil
	case len(vs) > 1:
		return "", fmt.Errorf("%w: %d %s headers", ErrBadSource, len(vs), h.opts.SourceHeader)
	}
	v := vs[0]
	if v == "" {
		return "", fmt.Errorf("%w: empty %s", ErrBadSource, h.opts.SourceHeader)
	}
	if len(v) > h.opts.MaxSourceBytes {
		return "", fmt.Errorf("%w: %s longer than %d bytes", ErrBadSource, h.opts.SourceHeader, h.opts.MaxSourceBytes)
	}
	for i := 0; i < len(v); i++ {
		if c := v[i]; c <= ' ' || c >= 0x7f {
			return "", fmt.Errorf("%w: %s %q has a byte outside printable ASCII", ErrBadSource, h.opts.SourceHeader, clip(v))
		}
	}
	return v, nil
}

// readBody reads the compressed body into a pooled buffer, reading at most
// MaxCompressedBytes+1 bytes: a larger body is detected without reading it
// all (and without reading at all when Content-Length announces it). The
// returned buffer, if not nil, must go back with putBody.
func (h *Handler) readBody(r *http.Request) (*[]byte, error) {
	limit := h.opts.MaxCompressedBytes
	if r.ContentLength > limit {
		return nil, fmt.Errorf("%w: Content-Length %d exceeds %d", ErrTooLarge, r.ContentLength, limit)
	}
	if r.ContentLength == 0 || r.Body == nil {
		return nil, ErrEmptyBody
	}
	want := initialBodyCap
	if r.ContentLength > 0 {
		want = int(r.ContentLength) + 1 // +1: room to see EOF without growing
	}
	bp, _ := h.bodies.Get().(*[]byte)
	if bp == nil || cap(*bp) < want && r.ContentLength > 0 {
		if bp != nil {
			h.putBody(bp)
		}
		b := make([]byte, 0, want)
		bp = &b
	}
	b := (*bp)[:0]
	lr := io.LimitedReader{R: r.Body, N: limit + 1}
	for {
		if len(b) == cap(b) {
			b = append(b, 0)[:len(b)]
		}
		n, err := lr.Read(b[len(b):cap(b)])
		b = b[:len(b)+n]
		if err == io.EOF {
			break
		}
		if err != nil {
			*bp = b
			if _, ok := errors.AsType[*http.MaxBytesError](err); ok {
				return bp, fmt.Errorf("%w: %v", ErrTooLarge, err)
			}
			return bp, fmt.Errorf("%w: reading body: %v", ErrMalformed, err)
		}
	}
	*bp = b
	switch {
	case int64(len(b)) > limit:
		return bp, fmt.Errorf("%w: body exceeds %d bytes", ErrTooLarge, limit)
	case len(b) == 0:
		return bp, ErrEmptyBody
	}
	return bp, nil
}

func (h *Handler) putBody(bp *[]byte) {
	if cap(*bp) <= maxPooledBuf {
		*bp = (*bp)[:0]
		h.bodies.Put(bp)
	}
}
