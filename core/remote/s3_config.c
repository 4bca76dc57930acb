/* s3_config.c: the s3:// URL and the AWS configuration of s3.h (environment, then the
 * profile in the credentials and config files). The AWS files are INI: "[section]" lines,
 * then "key = value" lines; a nested block ("s3 =" then indented keys) reads as keys of
 * its section. */
#include "s3.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "buf.h"

int s3_is_url(const char *path)
{
	return path && !strncmp(path, S3_URL_SCHEME, strlen(S3_URL_SCHEME));
}

int s3_url_parse(const char *url, char *bucket, size_t bucket_len, char *prefix,
		 size_t prefix_len, char *err, size_t errlen)
{
	const char *b, *slash;
	size_t n, p;

	if (!s3_is_url(url))
		return err_set(err, errlen, -EINVAL, "%s is not an s3:// URL", url);
	b = url + strlen(S3_URL_SCHEME);
	slash = strchr(b, '/');
	n = slash ? (size_t)(slash - b) : strlen(b);
	/* S3's rule for bucket names: 3 to 63 of [a-z0-9.-]; anything else cannot name one
	 * and would not fit a host name */
	if (n < 3 || n > 63 || strspn(b, "abcdefghijklmnopqrstuvwxyz0123456789.-") < n)
		return err_set(err, errlen, -EINVAL, "%s: the bucket name must be 3 to 63 "
			       "lowercase letters, digits, '.' or '-' (s3://BUCKET/PREFIX)", url);
	if (n >= bucket_len)
		return err_set(err, errlen, -EINVAL, "%s: bucket name too long", url);
	memcpy(bucket, b, n);
	bucket[n] = 0;
	b = slash ? slash + 1 : b + n;
	p = strlen(b);
	while (p && b[p - 1] == '/')
		p--;
	if (p >= prefix_len)
		return err_set(err, errlen, -EINVAL, "%s: prefix too long", url);
	memcpy(prefix, b, p);
	prefix[p] = 0;
	return 0;
}

static void copy(char *dst, size_t len, const char *src)
{
	snprintf(dst, len, "%s", src ? src : "");
}

static const char *env(const char *name)
{
	const char *v = getenv(name);

	return v && *v ? v : NULL;
}

static char *trim(char *s)
{
	char *e = s + strlen(s);

	while (*s == ' ' || *s == '\t')
		s++;
	while (e > s && strchr(" \t\r\n", e[-1]))
		*--e = 0;
	return s;
}

/* Look up key in section `section` of the INI file path into out (len bytes).
 * 1 found, 0 not found (or no file), -EINVAL (a line too long). */
static int ini_get(const char *path, const char *section, const char *key, char *out,
		   size_t len)
{
	char line[4608];
	int in = 0, found = 0;
	FILE *f = fopen(path, "re");

	if (!f)
		return 0;
	while (!found && fgets(line, sizeof(line), f)) {
		char *s, *eq;

		if (!strchr(line, '\n') && !feof(f)) {
			fclose(f);
			return -EINVAL;
		}
		s = trim(line);
		if (*s == '#' || *s == ';' || !*s)
			continue;
		if (*s == '[') {
			char *end = strchr(s, ']');

			if (end)
				*end = 0;
			in = !strcmp(trim(s + 1), section);
			continue;
		}
		eq = strchr(s, '=');
		if (!in || !eq)
			continue;
		*eq = 0;
		if (!strcmp(trim(s), key)) {
			copy(out, len, trim(eq + 1));
			found = 1;
		}
	}
	fclose(f);
	return found;
}

/* The AWS file named by variable var, else ~/.aws/name, into path. */
static void aws_file(const char *var, const char *name, char *path, size_t len)
{
	const char *home = env("HOME");

	if (env(var))
		copy(path, len, env(var));
	else
		snprintf(path, len, "%s/.aws/%s", home ? home : "", name);
}

/* key of profile p in the config file (section "profile p", or "default"). */
static int config_get(const char *cfg, const char *p, const char *key, char *out, size_t len)
{
	char section[300];

	if (!strcmp(p, "default"))
		return ini_get(cfg, "default", key, out, len);
	snprintf(section, sizeof(section), "profile %s", p);
	return ini_get(cfg, section, key, out, len);
}

static int load_credentials(struct s3_config *c, const char *cred, const char *cfg,
			    const char *profile, char *err, size_t errlen)
{
	const char *files[2] = { cred, cfg };
	int rc;

	if (env("AWS_ACCESS_KEY_ID") && env("AWS_SECRET_ACCESS_KEY")) {
		copy(c->access_key, sizeof(c->access_key), env("AWS_ACCESS_KEY_ID"));
		copy(c->secret_key, sizeof(c->secret_key), env("AWS_SECRET_ACCESS_KEY"));
		copy(c->session_token, sizeof(c->session_token), env("AWS_SESSION_TOKEN"));
		copy(c->source, sizeof(c->source), "the environment (AWS_ACCESS_KEY_ID)");
		return 0;
	}
	for (int k = 0; k < 2; k++) {
		rc = k == 0 ? ini_get(files[k], profile, "aws_access_key_id", c->access_key,
				      sizeof(c->access_key)) :
			      config_get(files[k], profile, "aws_access_key_id", c->access_key,
					 sizeof(c->access_key));
		if (rc < 0)
			return err_set(err, errlen, rc, "%s: a line is too long", files[k]);
		if (!rc)
			continue;
		rc = k == 0 ? ini_get(files[k], profile, "aws_secret_access_key", c->secret_key,
				      sizeof(c->secret_key)) :
			      config_get(files[k], profile, "aws_secret_access_key", c->secret_key,
					 sizeof(c->secret_key));
		if (rc <= 0)
			return err_set(err, errlen, -EACCES, "profile %s in %s has "
				       "aws_access_key_id but no aws_secret_access_key", profile,
				       files[k]);
		if (k == 0)
			ini_get(files[k], profile, "aws_session_token", c->session_token,
				sizeof(c->session_token));
		else
			config_get(files[k], profile, "aws_session_token", c->session_token,
				   sizeof(c->session_token));
		snprintf(c->source, sizeof(c->source), "profile %s in %s", profile, files[k]);
		return 0;
	}
	return err_set(err, errlen, -EACCES, "no S3 credentials: set AWS_ACCESS_KEY_ID and "
		       "AWS_SECRET_ACCESS_KEY, or profile %s in %s or %s", profile, cred, cfg);
}

/* Endpoint and addressing style, after the region is known. */
static int load_endpoint(struct s3_config *c, const char *cfg, const char *profile,
			 char *err, size_t errlen)
{
	char style[32] = "";
	const char *e = env("AWS_ENDPOINT_URL_S3") ? env("AWS_ENDPOINT_URL_S3") :
			env("AWS_ENDPOINT_URL");
	size_t n;

	if (e)
		copy(c->endpoint, sizeof(c->endpoint), e);
	else if (config_get(cfg, profile, "endpoint_url", c->endpoint, sizeof(c->endpoint)) <= 0)
		c->endpoint[0] = 0;
	if (strncmp(c->endpoint, "http://", 7) && strncmp(c->endpoint, "https://", 8) &&
	    c->endpoint[0])
		return err_set(err, errlen, -EINVAL, "endpoint %s is not an http:// or https:// "
			       "URL (AWS_ENDPOINT_URL)", c->endpoint);
	n = strlen(c->endpoint);
	while (n && c->endpoint[n - 1] == '/')
		c->endpoint[--n] = 0;
	c->path_style = c->endpoint[0] != 0;
	if (!c->endpoint[0])
		snprintf(c->endpoint, sizeof(c->endpoint), "https://s3.%s.amazonaws.com", c->region);
	if (env("AWS_S3_ADDRESSING_STYLE"))
		copy(style, sizeof(style), env("AWS_S3_ADDRESSING_STYLE"));
	else
		config_get(cfg, profile, "addressing_style", style, sizeof(style));
	if (!strcmp(style, "path"))
		c->path_style = 1;
	else if (!strcmp(style, "virtual"))
		c->path_style = 0;
	else if (style[0] && strcmp(style, "auto"))
		return err_set(err, errlen, -EINVAL, "addressing style '%s' is not path, virtual "
			       "or auto (AWS_S3_ADDRESSING_STYLE)", style);
	return 0;
}

int s3_config_load(struct s3_config *c, char *err, size_t errlen)
{
	char cred[1024], cfg[1024];
	const char *profile = env("AWS_PROFILE") ? env("AWS_PROFILE") : "default";
	int rc;

	memset(c, 0, sizeof(*c));
	aws_file("AWS_SHARED_CREDENTIALS_FILE", "credentials", cred, sizeof(cred));
	aws_file("AWS_CONFIG_FILE", "config", cfg, sizeof(cfg));
	if (env("AWS_REGION"))
		copy(c->region, sizeof(c->region), env("AWS_REGION"));
	else if (env("AWS_DEFAULT_REGION"))
		copy(c->region, sizeof(c->region), env("AWS_DEFAULT_REGION"));
	else if (config_get(cfg, profile, "region", c->region, sizeof(c->region)) <= 0)
		copy(c->region, sizeof(c->region), "us-east-1");
	if (strspn(c->region, "abcdefghijklmnopqrstuvwxyz0123456789-") != strlen(c->region))
		return err_set(err, errlen, -EINVAL, "region '%s' is not a region name", c->region);
	rc = load_endpoint(c, cfg, profile, err, errlen);
	if (!rc)
		rc = load_credentials(c, cred, cfg, profile, err, errlen);
	return rc;
}
