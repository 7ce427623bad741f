package cli

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	// The kubeconfig auth providers kubectl links: oidc, and the azure and
	// gcp stubs that say which exec plugin replaced them. Exec credential
	// plugins (users[].user.exec) are client-go's own.
	_ "k8s.io/client-go/plugin/pkg/client/auth"
)

// connectionMessage is kubectl's wording for an error on the way to the API
// server (k8s.io/kubectl/pkg/cmd/util.StandardErrorMessage), wherever it is
// in err's chain: a refused connection, any other transport failure (TLS,
// DNS, a timeout, a credential plugin that failed), or a 401. doing is
// what rollbook was doing, when it wrapped the error.
func connectionMessage(err error) (msg, doing string, ok bool) {
	var ue *url.Error
	switch {
	case errors.As(err, &ue) && !errors.Is(ue.Err, context.Canceled):
		doing = strings.TrimSuffix(strings.TrimSuffix(err.Error(), ue.Error()), ": ")
		if strings.Contains(ue.Err.Error(), "connection refused") {
			host := ue.URL
			if u, perr := url.Parse(ue.URL); perr == nil {
				host = u.Host
			}
			return fmt.Sprintf("The connection to the server %s was refused - did you specify the right host or port?", host), doing, true
		}
		return fmt.Sprintf("Unable to connect to the server: %v", ue.Err), doing, true
	case apierrors.IsUnauthorized(err):
		var st apierrors.APIStatus
		if errors.As(err, &st) {
			return fmt.Sprintf("error: You must be logged in to the server (%s)", st.Status().Message), "", true
		}
	}
	return "", "", false
}
