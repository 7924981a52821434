/* keel-peers: the ikcpcb fields that KCP's test.cpp sets directly
 * (rx_minrto, fastresend) and read-back of the settings for the peer's
 * test, so that Rust does not mirror struct IKCPCB's layout. Our code,
 * not part of ikcp. */
#include "ikcp.h"

void keel_ikcp_set_minrto(ikcpcb *kcp, int minrto) { kcp->rx_minrto = minrto; }

void keel_ikcp_set_fastresend(ikcpcb *kcp, int resend) { kcp->fastresend = resend; }

/* out[0..8] = nodelay, interval, fastresend, nocwnd, rx_minrto, snd_wnd,
 * rcv_wnd, mtu. */
void keel_ikcp_settings(const ikcpcb *kcp, long out[8])
{
	out[0] = (long)kcp->nodelay;
	out[1] = (long)kcp->interval;
	out[2] = (long)kcp->fastresend;
	out[3] = (long)kcp->nocwnd;
	out[4] = (long)kcp->rx_minrto;
	out[5] = (long)kcp->snd_wnd;
	out[6] = (long)kcp->rcv_wnd;
	out[7] = (long)kcp->mtu;
}
