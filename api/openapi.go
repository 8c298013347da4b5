package api

import (
	_ "embed"
	"net/http"

	"github.com/gin-gonic/gin"
)

//go:embed openapi.yaml
var openAPIDoc []byte

// OpenAPI returns the API's OpenAPI 3 document.
func OpenAPI() []byte { return openAPIDoc }

func (s *Server) openAPI(c *gin.Context) { c.Data(http.StatusOK, "application/yaml", openAPIDoc) }
