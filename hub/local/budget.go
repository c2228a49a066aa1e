package local

import (
	"errors"
	"net/http"
	"strconv"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"nodehub/cache"
	"nodehub/wire"
)

// pastBudget answers an offline change past its write budget (cache.BudgetError: the bytes its
// owner, or every owner that is not the node's, may write to flash a minute) as the apiserver
// answers past its rate limits: 429 with Retry-After and details.retryAfterSeconds, the seconds
// until the budget holds it. It says false for any other error.
func (p *Proxy) pastBudget(w http.ResponseWriter, req *Request, err error) bool {
	var be *cache.BudgetError
	if !errors.As(err, &be) {
		return false
	}
	secs := be.RetryAfterSeconds()
	st := wire.NewStatus(http.StatusTooManyRequests, "nodehub: the cloud is unreachable and offline writes are past their budget of flash bytes a minute; try again in "+strconv.Itoa(secs)+"s")
	st.Details = &metav1.StatusDetails{RetryAfterSeconds: int32(secs)}
	body, ct := wire.EncodeStatus(st, req.Info.Accept.IsProtobuf())
	w.Header().Set("Retry-After", strconv.Itoa(secs))
	writeBody(w, http.StatusTooManyRequests, ct, body)
	return true
}
